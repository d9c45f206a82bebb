//! The API's edges as a careless or hostile client meets them: a database that stops answering,
//! bodies that never finish arriving, MCP sessions (their owner, their number, their end), input
//! that cannot be stored, and a login that must come from a login form the server served.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;

/// `/readyz` through a database that stops answering (its connections held open, silent) says
/// "not ready" within its 2 s, however many ask at once — not after the pool's acquire timeout
/// or a hung statement's 30 s.
#[tokio::test]
async fn readyz_answers_in_time_when_the_database_stops_answering() {
    let api = Api::launch(
        "readyz_frozen",
        &[],
        Launch {
            proxy: true,
            ..Launch::default()
        },
    )
    .await;
    let readyz = || async {
        let r = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client")
            .get(format!("{}/readyz", api.base))
            .send()
            .await
            .expect("an answer within 10 s");
        (r.status(), r.text().await.expect("body"))
    };
    assert_eq!(readyz().await.0, StatusCode::OK);
    api.proxy.as_ref().expect("proxy").freeze();
    let answers = futures_util::future::join_all((0..4).map(|_| readyz())).await;
    for (status, body) in answers {
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains("no answer within 2 s"), "{body}");
    }
    drop(api.server);
    api.db.drop_db().await;
}

/// Sends a request head announcing a body of `len` bytes and then only `sent` of them.
async fn slow_body(addr: &str, path: &str, headers: &str, len: usize, sent: usize) -> TcpStream {
    let mut c = TcpStream::connect(addr).await.expect("connect");
    let head = format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len}\r\n{headers}\r\n");
    c.write_all(head.as_bytes()).await.expect("head");
    c.write_all(&vec![b'a'; sent])
        .await
        .expect("part of the body");
    c
}

/// The status line of what `c` is answered before it closes, within `limit`.
async fn answered(mut c: TcpStream, limit: Duration) -> String {
    let mut got = Vec::new();
    let _ = tokio::time::timeout(limit, c.read_to_end(&mut got))
        .await
        .expect("answered and closed in time");
    String::from_utf8_lossy(&got)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Bodies that never finish arriving hold no connection past `--http-body-timeout`: slow logins
/// filling every connection slot (each from a login form the server served, so that its body is
/// read) are answered 408 and closed, and `/healthz` answers again; a slow submit with a valid
/// token gets a 408 problem; a login with no login form of the server's is refused at once,
/// without waiting for its body.
#[tokio::test]
async fn slow_bodies_are_cut_off_and_unauthenticated_ones_refused_first() {
    let api = Api::start_with(
        "slow_bodies",
        &[
            "--http-max-connections",
            "4",
            "--http-body-timeout",
            "2s",
            "--http-header-timeout",
            "30s",
        ],
    )
    .await;
    let addr = api.base.trim_start_matches("http://").to_owned();
    let mut logins = Vec::new();
    for _ in 0..4 {
        let mut console = ConsoleClient::new(&api);
        let (status, _, _) = console.get("/console/login").await;
        assert_eq!(status, StatusCode::OK);
        let cookie = format!(
            "Cookie: {}\r\nContent-Type: application/x-www-form-urlencoded\r\n",
            console.cookie_header()
        );
        logins.push(slow_body(&addr, "/console/login", &cookie, 1000, 10).await);
    }
    // Every slot is held by a slow body: /healthz waits for one to be cut off.
    let healthz = async {
        let mut c = TcpStream::connect(&addr).await.expect("connect");
        c.write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            .await
            .expect("send");
        answered(c, Duration::from_secs(10)).await
    };
    assert_eq!(healthz.await, "HTTP/1.1 200 OK");
    for login in logins {
        let status = answered(login, Duration::from_secs(10)).await;
        assert!(status.starts_with("HTTP/1.1 408"), "{status}");
    }

    let token = api.token("tenant-a");
    let submit = slow_body(
        &addr,
        "/v1/intents",
        &format!(
            "Authorization: Bearer {token}\r\nIdempotency-Key: slow-1\r\n\
             Content-Type: application/json\r\n"
        ),
        1000,
        10,
    )
    .await;
    let status = answered(submit, Duration::from_secs(10)).await;
    assert!(status.starts_with("HTTP/1.1 408"), "{status}");

    // No login form of the server's: refused before the body is read (the body never comes).
    let forged = slow_body(
        &addr,
        "/console/login",
        "Cookie: oncebox_login=made-up\r\nContent-Type: application/x-www-form-urlencoded\r\n",
        1000,
        0,
    )
    .await;
    let mut first = [0u8; 12];
    let mut forged = forged;
    tokio::time::timeout(Duration::from_secs(1), forged.read_exact(&mut first))
        .await
        .expect("answered without waiting for the body")
        .expect("read");
    assert_eq!(&first, b"HTTP/1.1 403");
    api.stop().await;
}

/// A JSON-RPC message to `/mcp` as `token`, in `session` when given: status, session header,
/// body.
pub(super) async fn mcp_post(
    api: &Api,
    token: &str,
    session: Option<&str>,
    message: Value,
) -> (StatusCode, Option<String>, String) {
    let mut r = api
        .client
        .post(format!("{}/mcp", api.base))
        .bearer(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-06-18")
        .body(message.to_string());
    if let Some(s) = session {
        r = r.header("mcp-session-id", s);
    }
    let r = r.send().await.expect("POST /mcp");
    let session = header(&r, "mcp-session-id");
    (r.status(), session, r.text().await.expect("body"))
}

/// Opens an MCP session as `token`: its id.
pub(super) async fn open_session(api: &Api, token: &str) -> Result<String, (StatusCode, String)> {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "edges", "version": "1"}}});
    let (status, session, body) = mcp_post(api, token, None, init).await;
    let Some(session) = session.filter(|_| status.is_success()) else {
        return Err((status, body));
    };
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, body) = mcp_post(api, token, Some(&session), done).await;
    assert!(status.is_success(), "{status}: {body}");
    Ok(session)
}

pub(super) async fn mcp_delete(api: &Api, token: &str, session: &str) -> StatusCode {
    api.client
        .delete(format!("{}/mcp", api.base))
        .bearer(token)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .send()
        .await
        .expect("DELETE /mcp")
        .status()
}

/// An MCP session belongs to the token that opened it: another token — another tenant's, or the
/// same tenant's — can neither use nor end it. At most `--mcp-max-sessions` live at once (503
/// beyond, with Retry-After); ending one (204, as clients expect) makes room. `/mcp` bodies are
/// held to `--body-limit`, and no session id reaches the log.
#[tokio::test]
async fn mcp_sessions_are_bound_capped_and_ended_quietly() {
    let log = std::env::temp_dir().join(format!("oncebox-mcp-sessions-{}.log", std::process::id()));
    let api = Api::launch(
        "mcp_sessions",
        &["--mcp-max-sessions", "2"],
        Launch {
            log: Some(log.clone()),
            env: vec![("ONCEBOX_LOG".into(), "debug".into())],
            ..Launch::default()
        },
    )
    .await;
    let (a, b) = (api.token("tenant-a"), api.token("tenant-b"));
    let a_again = api.token("tenant-a");
    let mine = open_session(&api, &a).await.expect("a session");
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    for other in [&b, &a_again] {
        let (status, _, body) = mcp_post(&api, other, Some(&mine), list.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(mcp_delete(&api, other, &mine).await, StatusCode::NOT_FOUND);
    }
    let (status, _, body) = mcp_post(&api, &a, Some(&mine), list.clone()).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the owner's session lives on: {body}"
    );

    let second = open_session(&api, &b).await.expect("a second session");
    let (status, body) = open_session(&api, &a_again).await.expect_err("a third");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("MCP sessions"), "{body}");
    assert_eq!(mcp_delete(&api, &b, &second).await, StatusCode::NO_CONTENT);
    let third = open_session(&api, &a_again).await.expect("room again");

    let huge = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "create_invoice", "arguments": {"blob": "x".repeat(8 * 1024)}}});
    let (status, _, body) = mcp_post(&api, &a, Some(&mine), huge).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");

    let written = std::fs::read_to_string(&log).expect("log");
    assert!(
        written.contains("serving the API"),
        "the log holds what the server says at debug level: {written}"
    );
    for id in [&mine, &second, &third] {
        assert!(!written.contains(id.as_str()), "a session id in the log");
    }
    let _ = std::fs::remove_file(&log);
    api.stop().await;
}

/// One agent cannot lock the others out of `/mcp`: a token holds at most
/// `--mcp-max-sessions-per-token` sessions and a tenant's tokens together
/// `--mcp-max-sessions-per-tenant` (429 beyond, with Retry-After), while another tenant still
/// opens its own; ending one makes room again.
#[tokio::test]
async fn one_token_or_tenant_cannot_take_every_mcp_session() {
    let api = Api::start_with(
        "mcp_shares",
        &[
            "--mcp-max-sessions",
            "10",
            "--mcp-max-sessions-per-token",
            "2",
            "--mcp-max-sessions-per-tenant",
            "3",
        ],
    )
    .await;
    let (a1, a2, b) = (
        api.token("tenant-a"),
        api.token("tenant-a"),
        api.token("tenant-b"),
    );
    let first = open_session(&api, &a1).await.expect("a1's first");
    open_session(&api, &a1).await.expect("a1's second");
    let (status, body) = open_session(&api, &a1).await.expect_err("a1's third");
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("this token holds 2"), "{body}");
    open_session(&api, &a2).await.expect("the tenant's third");
    let (status, body) = open_session(&api, &a2)
        .await
        .expect_err("the tenant's fourth");
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("this tenant's tokens hold 3"), "{body}");
    for _ in 0..2 {
        open_session(&api, &b)
            .await
            .expect("another tenant is not locked out");
    }
    assert_eq!(mcp_delete(&api, &a1, &first).await, StatusCode::NO_CONTENT);
    open_session(&api, &a2)
        .await
        .expect("room again in the tenant");
    api.stop().await;
}

/// No log level shows a value the redaction rules cover: at trace, a tool call whose `card` the
/// action drops leaves the card in no log line (rmcp logs every message it receives and sends
/// at debug and trace; `oncebox` holds it to info whatever `ONCEBOX_LOG` asks).
#[tokio::test]
async fn no_log_level_shows_a_redacted_argument() {
    let log = std::env::temp_dir().join(format!("oncebox-mcp-trace-{}.log", std::process::id()));
    let api = Api::launch(
        "mcp_trace",
        &["--tool-wait", "1s"],
        Launch {
            log: Some(log.clone()),
            env: vec![("ONCEBOX_LOG".into(), "trace,rmcp=trace".into())],
            ..Launch::default()
        },
    )
    .await;
    let token = api.token("tenant-a");
    let session = open_session(&api, &token).await.expect("a session");
    let card = "4111111111117777";
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "charge", "arguments": {"order_id": "o-log", "card": card},
        "_meta": {"oncebox.dev/idempotency_key": "log-1"}}});
    let (status, _, body) = mcp_post(&api, &token, Some(&session), call).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("log-1"), "the call was taken: {body}");
    api.stop().await;
    let written = std::fs::read_to_string(&log).expect("log");
    assert!(
        written.lines().any(|l| l.contains(" TRACE ")),
        "the log holds what the server says at trace level: {written}"
    );
    assert!(!written.contains(card), "a dropped field in the log");
    let _ = std::fs::remove_file(&log);
}

/// Keys `.` and `..` name no resource in a URL path (every URL parser resolves them): they are
/// refused at submit, naming the key.
#[tokio::test]
async fn dot_segment_keys_are_refused() {
    let api = Api::start("dot_keys").await;
    let token = api.token("tenant-a");
    for key in [".", ".."] {
        let got = api
            .post(Some(&token), Some(key), "application/json", invoice(1))
            .await;
        problem(&got, 400, "Idempotency-Key");
        assert!(
            got.1["detail"]
                .as_str()
                .is_some_and(|d| d.contains("dot segment")),
            "{:?}",
            got.1
        );
    }
    api.stop().await;
}

/// What cannot be stored or never matches — U+0000 in a key, a search, a filter; an age or a
/// page cursor beyond any date — is answered as such (404, 400, a note on the page), never with
/// a 500 or an error in the log; so is a get_intent or task of such a key over MCP, which is not
/// told to call again.
#[tokio::test]
async fn input_that_cannot_be_stored_is_refused_not_a_server_error() {
    let log = std::env::temp_dir().join(format!("oncebox-inputs-{}.log", std::process::id()));
    let api = Api::launch(
        "bad_inputs",
        &[],
        Launch {
            log: Some(log.clone()),
            ..Launch::default()
        },
    )
    .await;
    let ops = api.token_with_role("tenant-a", "ops");
    let mut console = ConsoleClient::new(&api);
    let (status, location, _, _) = console.login(&ops).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{location:?}");
    for (path, want) in [
        ("/console/intents/a%00b", StatusCode::NOT_FOUND),
        ("/console/search?q=a%00b", StatusCode::BAD_REQUEST),
        ("/console/attention?action=a%00b", StatusCode::OK),
        (
            "/console/attention?older_than=99999999999999d",
            StatusCode::OK,
        ),
        (
            "/console/attention?after=%2B200000-01-01T00:00:00Z,1",
            StatusCode::OK,
        ),
        (
            "/console/attention?after=1000-01-01T00:00:00Z,1",
            StatusCode::OK,
        ),
    ] {
        let (status, _, page) = console.get(path).await;
        assert_eq!(status, want, "{path}: {page}");
    }
    let (_, _, page) = console
        .get("/console/attention?older_than=99999999999999d")
        .await;
    assert!(
        page.contains("older_than"),
        "the page names the field: {page}"
    );

    let agent = api.token("tenant-a");
    let session = open_session(&api, &agent).await.expect("session");
    let call = |id: u64, name: &str, arguments: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}})
    };
    let (status, _, body) = mcp_post(
        &api,
        &agent,
        Some(&session),
        call(5, "get_intent", json!({"idempotency_key": "a\u{0}b"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("invalid"), "{body}");
    assert!(!body.contains("call again"), "{body}");
    let task = json!({"jsonrpc": "2.0", "id": 6, "method": "tasks/get",
        "params": {"taskId": "a\u{0}b"}});
    let (_, _, body) = mcp_post(&api, &agent, Some(&session), task).await;
    assert!(!body.contains("call again"), "{body}");

    let written = std::fs::read_to_string(&log).expect("log");
    assert!(!written.contains("ERROR"), "an error in the log: {written}");
    let _ = std::fs::remove_file(&log);
    api.stop().await;
}

/// A login is taken once, only for a login form this server served: a forged pair of cookie
/// and form field (what a neighbouring site could plant) is refused, and so is a form used
/// twice. An ops token past its request rate gets no new session.
#[tokio::test]
async fn a_login_needs_a_served_form_and_stays_within_the_rate() {
    let api = Api::start_with(
        "login_forms",
        &["--token-rate", "0.01", "--token-burst", "3"],
    )
    .await;
    let ops = api.token_with_role("tenant-a", "ops");
    let sessions = || async {
        let mut conn = PgConnection::connect(&api.db_url).await.expect("db");
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM oncebox.console_sessions")
            .fetch_one(&mut conn)
            .await
            .expect("count")
    };

    let mut forger = ConsoleClient::new(&api);
    forger
        .cookies
        .insert("oncebox_login".into(), "f".repeat(64));
    let (status, _, _, _) = forger
        .post(
            "/console/login",
            &[("csrf", &"f".repeat(64)), ("token", &ops)],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a double-submit forgery");

    let mut twice = ConsoleClient::new(&api);
    let (_, _, page) = twice.get("/console/login").await;
    let csrf = csrf_in(&page);
    let cookies = twice.cookies.clone();
    let (status, _, _, _) = twice
        .post("/console/login", &[("csrf", &csrf), ("token", &ops)])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    twice.cookies = cookies;
    let (status, _, _, _) = twice
        .post("/console/login", &[("csrf", &csrf), ("token", &ops)])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a login form is used once");
    assert_eq!(sessions().await, 1);

    // The token's burst is 3 and the first login took one; the fourth is refused.
    for _ in 0..2 {
        let (status, _, _, _) = ConsoleClient::new(&api).login(&ops).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
    }
    let (status, _, _, page) = ConsoleClient::new(&api).login(&ops).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{page}");
    assert_eq!(sessions().await, 3, "no session past the rate");
    api.stop().await;
}

/// A tool call's `_meta` ordering key puts its intent in a lane, as the API's `ordering_key`
/// does: two calls with the same one are numbered in the order they were made, the second
/// parked behind the first; one without it joins no lane.
#[tokio::test]
async fn an_mcp_calls_ordering_key_joins_a_lane() {
    let api = Api::start_with("mcp_lanes", &["--tool-wait", "100ms"]).await;
    let agent = api.token("tenant-a");
    let session = open_session(&api, &agent).await.expect("session");
    for (id, key, meta) in [
        (
            10,
            "lane-1",
            json!({"oncebox.dev/ordering_key": "account-7"}),
        ),
        (
            11,
            "lane-2",
            json!({"oncebox.dev/ordering_key": "account-7"}),
        ),
        (12, "free", json!({})),
    ] {
        let mut meta = meta;
        meta["oncebox.dev/idempotency_key"] = json!(key);
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "create_invoice", "arguments": {"n": id}, "_meta": meta}});
        let (status, _, body) = mcp_post(&api, &agent, Some(&session), call).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(body.contains("pending"), "{body}");
    }
    let mut conn = PgConnection::connect(&api.db_url).await.expect("db");
    let rows: Vec<(String, Option<String>, Option<i64>, bool)> = sqlx::query_as(
        "SELECT i.idempotency_key, i.ordering_key, i.lane_seq, o.available_at = 'infinity' \
         FROM oncebox.intents i JOIN oncebox.outbox o ON o.intent_id = i.id \
         ORDER BY i.idempotency_key",
    )
    .fetch_all(&mut conn)
    .await
    .expect("intents");
    assert_eq!(
        rows,
        [
            ("free".to_owned(), None, None, false),
            (
                "lane-1".to_owned(),
                Some("account-7".to_owned()),
                Some(1),
                false
            ),
            (
                "lane-2".to_owned(),
                Some("account-7".to_owned()),
                Some(2),
                true
            ),
        ]
    );
    api.stop().await;
}
