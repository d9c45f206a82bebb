//! The HTTP API end to end: the real `oncebox serve` binary, the real Postgres, HTTP over
//! loopback. Every error must be problem+json and never a 5xx.

mod support;
use support::{
    PgProxy, Proc, TestDb, assert_connection_cap, assert_lingering_connections_closed, free_addr,
    pytools, run_ok,
};

use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};

const BIN: &str = env!("CARGO_BIN_EXE_oncebox");

/// The redaction keys `oncebox serve` runs with (the configuration's rules need one).
const REDACTION_KEYS: &str = "test:a secret of thirty-two bytes or more";

const CONFIG: &str = r#"
[actions.create_invoice]
destination = "billing"
tool = { description = "Create an invoice, once." }

[actions.charge]
destination = "billing"
redact = [{ pointer = "/card", mode = "drop" }]
[actions.charge.tool]
description = "Charge an order, once."
key = ["/order_id"]
dedupe_window = "2s"

[actions.refund]
destination = "billing"
[actions.refund.arguments_schema]
type = "object"
required = ["amount"]
properties.amount = { type = "string", pattern = "^[0-9]+[.][0-9]{2}$" }

[actions.payout]
destination = "billing"
tool = { description = "Pay out; large amounts wait for two people." }
redact = [{ pointer = "/iban", mode = "hash" }]
[actions.payout.approval]
when = { type = "object", required = ["amount"], properties = { amount = { decimalMinimum = "1000" } } }
approvals = 2

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/invoices"
idempotency = "key"
"#;

/// How a test's `oncebox serve` runs, beyond its flags.
#[derive(Default)]
struct Launch {
    /// Its stderr goes to this file (else nowhere).
    log: Option<std::path::PathBuf>,
    /// Its environment, beyond `DATABASE_URL`.
    env: Vec<(String, String)>,
    /// It reaches the database through a proxy the test can freeze ([`Api::proxy`]).
    proxy: bool,
}

struct Api {
    db: TestDb,
    db_url: String,
    base: String,
    server: Proc,
    client: reqwest::Client,
    /// The proxy between the server and its database, when it was launched with one.
    proxy: Option<PgProxy>,
}

impl Api {
    async fn start(test: &str) -> Api {
        Api::start_with(test, &[]).await
    }

    /// Starts `oncebox serve` with `extra` flags.
    async fn start_with(test: &str, extra: &[&str]) -> Api {
        Api::launch(test, extra, Launch::default()).await
    }

    /// Starts `oncebox serve` with `extra` flags, as `how` says.
    async fn launch(test: &str, extra: &[&str], how: Launch) -> Api {
        oncebox_delivery::install_crypto_provider();
        let db = TestDb::new("api", test, false).await;
        let db_url = db.url().to_owned();
        let config = std::env::temp_dir().join(format!("{}.toml", db.name()));
        std::fs::write(&config, CONFIG).expect("config");
        let run = |args: &[&str]| {
            Command::new(BIN)
                .args(args)
                .env("DATABASE_URL", &db_url)
                .output()
                .expect("oncebox")
        };
        assert!(run(&["migrate"]).status.success());
        let proxy = match how.proxy {
            true => Some(PgProxy::start(&db_url).await),
            false => None,
        };
        let server_db = proxy.as_ref().map_or(db_url.clone(), |p| p.url.clone());
        let addr = free_addr();
        let stderr = match &how.log {
            Some(path) => Stdio::from(std::fs::File::create(path).expect("log file")),
            None => Stdio::null(),
        };
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--config"])
            .arg(&config)
            .args(["--listen", &addr, "--body-limit", "4096"])
            .args(extra)
            .env("DATABASE_URL", &server_db)
            .env("ONCEBOX_REDACTION_KEYS", REDACTION_KEYS)
            .stdout(Stdio::null())
            .stderr(stderr);
        for (k, v) in &how.env {
            cmd.env(k, v);
        }
        let server = Proc::spawn(&mut cmd, "oncebox serve");
        let api = Api {
            db,
            db_url,
            base: format!("http://{addr}"),
            server,
            client: reqwest::Client::new(),
            proxy,
        };
        // Listening is enough to go on (the TLS test's server answers no plain request).
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(&addr).await.is_ok() {
                return api;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the API did not come up");
    }

    /// A directory for the test's files (its config is there).
    fn dir(&self) -> std::path::PathBuf {
        std::env::temp_dir()
    }

    fn token(&self, tenant: &str) -> String {
        self.token_with_role(tenant, "agent")
    }

    /// A token of `tenant` with `role`; an ops token is issued to a holder of its own
    /// (`ops-N@TENANT`), so that each is a principal of its own.
    fn token_with_role(&self, tenant: &str, role: &str) -> String {
        static ISSUED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = ISSUED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let holder = format!("ops-{n}@{tenant}");
        let mut args = vec!["ops", "token", "create", "--tenant", tenant, "--role", role];
        if role == "ops" {
            args.extend(["--holder", &holder]);
        }
        let out = run_ok(
            Command::new(BIN)
                .args(&args)
                .env("DATABASE_URL", &self.db_url),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    async fn post(
        &self,
        token: Option<&str>,
        key: Option<&str>,
        content_type: &str,
        body: String,
    ) -> (StatusCode, Value, String) {
        let mut req = self
            .client
            .post(format!("{}/v1/intents", self.base))
            .header("content-type", content_type)
            .body(body);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(k) = key {
            req = req.header("idempotency-key", k);
        }
        answer(req.send().await.expect("POST")).await
    }

    async fn get(&self, token: &str, path: &str) -> (StatusCode, Value, String) {
        answer(
            self.client
                .get(format!("{}{path}", self.base))
                .bearer(token)
                .send()
                .await
                .expect("GET"),
        )
        .await
    }

    async fn stop(self) {
        assert!(
            self.server.stop().await.success(),
            "the API exits 0 on SIGTERM"
        );
        self.db.drop_db().await;
    }
}

/// The value of the series `series` (name and labels, exactly) in a Prometheus text body.
fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(name, _)| *name == series)
        .and_then(|(_, v)| v.parse().ok())
}

trait Bearer {
    fn bearer(self, token: &str) -> Self;
}

impl Bearer for reqwest::RequestBuilder {
    fn bearer(self, token: &str) -> Self {
        self.header("authorization", format!("Bearer {token}"))
    }
}

/// A response header's value, when it is there and text.
fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn answer(r: reqwest::Response) -> (StatusCode, Value, String) {
    let status = r.status();
    let ct = header(&r, "content-type").unwrap_or_default();
    let body = r.text().await.expect("body");
    (
        status,
        serde_json::from_str(&body).unwrap_or(Value::Null),
        ct,
    )
}

fn invoice(n: i64) -> String {
    json!({"action": "create_invoice", "arguments": {"order_id": format!("order-{n}"), "amount": "10.00"}}).to_string()
}

/// An error must be a 4xx problem+json naming `field`.
fn problem(got: &(StatusCode, Value, String), status: u16, field: &str) {
    assert_eq!(got.0.as_u16(), status, "{:?}", got.1);
    assert_eq!(got.2, "application/problem+json", "{:?}", got.1);
    assert_eq!(got.1["status"], status);
    assert_eq!(got.1["field"], field, "{:?}", got.1);
}

#[tokio::test]
async fn every_status_code_is_as_documented() {
    let api = Api::start("codes").await;
    let t = api.token("tenant-a");
    let json = "application/json";

    problem(
        &api.post(None, Some("k1"), json, invoice(1)).await,
        401,
        "authorization",
    );
    problem(
        &api.post(Some("obx_nope"), Some("k1"), json, invoice(1))
            .await,
        401,
        "authorization",
    );
    problem(
        &api.post(Some(&t), None, json, invoice(1)).await,
        400,
        "Idempotency-Key",
    );
    problem(
        &api.post(Some(&t), Some("\"a b\""), json, invoice(1)).await,
        400,
        "Idempotency-Key",
    );
    problem(
        &api.post(Some(&t), Some("\"unterminated"), json, invoice(1))
            .await,
        400,
        "Idempotency-Key",
    );
    problem(
        &api.post(Some(&t), Some(&"k".repeat(300)), json, invoice(1))
            .await,
        400,
        "Idempotency-Key",
    );
    problem(
        &api.post(Some(&t), Some("k1"), "text/plain", invoice(1))
            .await,
        415,
        "content-type",
    );
    let huge =
        json!({"action": "create_invoice", "arguments": {"blob": "x".repeat(5000)}}).to_string();
    problem(
        &api.post(Some(&t), Some("k1"), json, huge).await,
        413,
        "body",
    );
    problem(
        &api.post(Some(&t), Some("k1"), json, "{not json".into())
            .await,
        400,
        "body",
    );
    problem(
        &api.post(
            Some(&t),
            Some("k1"),
            json,
            json!({"action": 5, "arguments": {}}).to_string(),
        )
        .await,
        400,
        "action",
    );
    problem(
        &api.post(
            Some(&t),
            Some("k1"),
            json,
            json!({"action": "create_invoice", "arguments": {}, "colour": 1}).to_string(),
        )
        .await,
        400,
        "colour",
    );
    problem(
        &api.post(
            Some(&t),
            Some("k1"),
            json,
            json!({"action": "create_invoice", "arguments": [1]}).to_string(),
        )
        .await,
        400,
        "arguments",
    );
    problem(
        &api.post(
            Some(&t),
            Some("k1"),
            json,
            json!({"action": "send_email", "arguments": {}}).to_string(),
        )
        .await,
        422,
        "action",
    );

    // First submit 202, replay 200 with the same intent, other payload under the key 422.
    let first = api
        .post(Some(&t), Some("\"order-1\""), json, invoice(1))
        .await;
    assert_eq!(first.0, StatusCode::ACCEPTED, "{:?}", first.1);
    assert_eq!(first.1["status"], "pending");
    let replay = api.post(Some(&t), Some("order-1"), json, invoice(1)).await;
    assert_eq!(replay.0, StatusCode::OK);
    assert_eq!(replay.1, first.1, "the same intent, byte for byte");
    problem(
        &api.post(Some(&t), Some("order-1"), json, invoice(2)).await,
        422,
        "Idempotency-Key",
    );

    let got = api.get(&t, "/v1/intents/order-1").await;
    assert_eq!(got.0, StatusCode::OK);
    assert_eq!(got.1["idempotency_key"], "order-1");
    problem(&api.get(&t, "/v1/intents/none").await, 404, "key");
    problem(
        &api.get(&t, "/v1/intents/order-1?wait=61").await,
        400,
        "wait",
    );
    problem(
        &api.get(&t, "/v1/intents/order-1?wait=soon").await,
        400,
        "wait",
    );

    let cancel = |key: &str| {
        api.client
            .post(format!("{}/v1/intents/{key}/cancel", api.base))
            .bearer(&t)
            .send()
    };
    let c = answer(cancel("order-1").await.expect("cancel")).await;
    assert_eq!(c.0, StatusCode::OK, "{:?}", c.1);
    assert_eq!(c.1["status"], "cancelled");
    problem(
        &answer(cancel("order-1").await.expect("cancel")).await,
        409,
        "key",
    );

    assert_eq!(
        api.client
            .get(format!("{}/healthz", api.base))
            .send()
            .await
            .expect("h")
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        api.client
            .get(format!("{}/readyz", api.base))
            .send()
            .await
            .expect("r")
            .status(),
        StatusCode::OK
    );
    api.stop().await;
}

/// serde_json turns an integer literal beyond the 64-bit range into a float before any check
/// sees it: such a body used to be stored and delivered as `1.2345678901234568e+29`, and a
/// resubmit with another such number hashed alike (a replay, not a conflict). Every number
/// beyond ±2^53 is a 400 naming its place, whatever its size or spelling, and nothing is stored
/// (fuzzing found the float case: `7e20` was accepted, its canonical form refused).
#[tokio::test]
async fn integers_beyond_2_pow_53_are_refused_whatever_their_size() {
    let api = Api::start("bigint").await;
    let t = api.token("tenant-a");
    for literal in [
        "123456789012345678901234567890",
        "123456789012345678901234567999",
        "18446744073709551616",
        "-9223372036854775809",
        "9007199254740993",
        &"9".repeat(500),
        // Floats too: JCS writes 7e20 as 700000000000000000000, and its neighbours hash alike.
        "7e20",
        "-1.5e300",
        "1e400",
    ] {
        let body = format!(
            r#"{{"action": "create_invoice", "arguments": {{"order_id": "o", "amount": "1", "n": [{literal}]}}}}"#
        );
        let got = api
            .post(Some(&t), Some("big"), "application/json", body)
            .await;
        problem(&got, 400, "arguments/n/0");
        assert!(
            got.1["detail"].as_str().is_some_and(|d| d.contains("2^53")),
            "{literal}: {:?}",
            got.1
        );
    }
    problem(&api.get(&t, "/v1/intents/big").await, 404, "key");
    // The boundary itself and floats by their own spelling are accepted.
    let body = r#"{"action": "create_invoice", "arguments": {"order_id": "o", "amount": "1", "n": [9007199254740992, 2.5e15, 1.5, 1e-30]}}"#;
    let got = api
        .post(Some(&t), Some("big"), "application/json", body.into())
        .await;
    assert_eq!(got.0, StatusCode::ACCEPTED, "{:?}", got.1);
    api.stop().await;
}

/// An action's JSON Schema is enforced by the API as by every intake path: 400 naming the field,
/// the value masked, nothing written.
#[tokio::test]
async fn an_actions_schema_refuses_arguments_naming_the_field() {
    let api = Api::start("schema").await;
    let t = api.token("tenant-a");
    for (arguments, field) in [
        (r#"{"amount": "4111111111111111"}"#, "arguments/amount"),
        (r#"{"amount": 5}"#, "arguments/amount"),
        (r#"{"note": "x"}"#, "arguments"),
    ] {
        let body = format!(r#"{{"action": "refund", "arguments": {arguments}}}"#);
        let got = api
            .post(Some(&t), Some("refund-1"), "application/json", body)
            .await;
        problem(&got, 400, field);
        assert!(!got.2.contains("4111111111111111"), "masked: {}", got.2);
    }
    problem(&api.get(&t, "/v1/intents/refund-1").await, 404, "key");
    let body = r#"{"action": "refund", "arguments": {"amount": "5.00"}}"#.to_owned();
    let got = api
        .post(Some(&t), Some("refund-1"), "application/json", body)
        .await;
    assert_eq!(got.0, StatusCode::ACCEPTED, "{:?}", got.1);
    api.stop().await;
}

/// `ordering_key` over the API: the intent joins its lane (the second waits parked behind the
/// first), the key comes back in the intent, and a bad one is a 400 naming the field.
#[tokio::test]
async fn an_ordering_key_joins_a_lane_and_a_bad_one_names_the_field() {
    use oncebox_client::{Client, Submit};
    let api = Api::start("ordering").await;
    let t = api.token("tenant-a");
    let client = Client::new(&api.base, &t).expect("client");
    for key in ["o-1", "o-2"] {
        let request = Submit::new("create_invoice", json!({"order_id": key, "amount": "1.00"}))
            .ordering_key("account-7");
        let submitted = client.submit(key, &request).await.expect("submit");
        assert!(submitted.created);
        assert_eq!(submitted.intent.ordering_key.as_deref(), Some("account-7"));
    }
    let (status, got, _) = api.get(&t, "/v1/intents/o-2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["ordering_key"], "account-7");
    let db = sqlx::PgPool::connect(&api.db_url).await.expect("db");
    let parked: Vec<(String, bool)> = sqlx::query_as(
        "SELECT i.idempotency_key, o.available_at = 'infinity' FROM oncebox.outbox o \
         JOIN oncebox.intents i ON i.id = o.intent_id ORDER BY i.id",
    )
    .fetch_all(&db)
    .await
    .expect("outbox");
    assert_eq!(parked, vec![("o-1".into(), false), ("o-2".into(), true)]);
    db.close().await;
    for bad in [r#"5"#, r#""""#, r#""a\nb""#] {
        let body =
            format!(r#"{{"action": "create_invoice", "arguments": {{}}, "ordering_key": {bad}}}"#);
        let got = api
            .post(Some(&t), Some("o-bad"), "application/json", body)
            .await;
        problem(&got, 400, "ordering_key");
    }
    api.stop().await;
}

/// What schemathesis found as 500s, pinned down as deterministic cases: each is a 400 naming
/// its field now. And `/readyz` says 503 until the schema is current.
#[tokio::test]
async fn what_fuzzing_found_stays_fixed_and_readyz_tells_an_old_schema() {
    let api = Api::start("fuzzed").await;
    let t = api.token("tenant-a");
    let ops = api.token_with_role("tenant-a", "ops");
    // U+0000 in arguments: Postgres cannot store it.
    problem(
        &api.post(
            Some(&t),
            Some("nul-1"),
            "application/json",
            r#"{"action": "create_invoice", "arguments": {"note": "a\u0000b"}}"#.to_owned(),
        )
        .await,
        400,
        "arguments/note",
    );
    // An age beyond any timestamp, and a limit of zero.
    problem(
        &api.get(
            &ops,
            "/v1/ops/intents?older_than_seconds=18446744073709551615",
        )
        .await,
        400,
        "older_than_seconds",
    );
    problem(
        &api.get(&ops, "/v1/ops/intents?limit=0").await,
        400,
        "limit",
    );
    assert_eq!(
        intents_in(&api.db_url).await,
        (0, 0),
        "nothing was written for a refused request"
    );
    let ready = |api: &Api| api.client.get(format!("{}/readyz", api.base)).send();
    assert_eq!(ready(&api).await.expect("readyz").status(), StatusCode::OK);
    // A migration this binary knows is missing from the database: not ready, and it says why.
    let mut db = PgConnection::connect(&api.db_url).await.expect("db");
    sqlx::query(
        "DELETE FROM oncebox._sqlx_migrations \
         WHERE version = (SELECT max(version) FROM oncebox._sqlx_migrations)",
    )
    .execute(&mut db)
    .await
    .expect("forget a migration");
    let not_ready = || async {
        let answer = ready(&api).await.expect("readyz");
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = answer.text().await.expect("body");
        assert!(body.starts_with("migrations:"), "{body}");
    };
    not_ready().await;
    // An application sharing the database keeps its own sqlx history in public._sqlx_migrations:
    // however many rows it has, they say nothing of oncebox's schema.
    support::app_migrator(20)
        .run(&mut db)
        .await
        .expect("the application's migrations");
    not_ready().await;
    api.stop().await;
}

#[tokio::test]
async fn tenants_cannot_see_cancel_or_probe_each_others_keys() {
    let api = Api::start("tenants").await;
    let (a, b) = (api.token("tenant-a"), api.token("tenant-b"));
    let created = api
        .post(Some(&a), Some("shared"), "application/json", invoice(1))
        .await;
    assert_eq!(created.0, StatusCode::ACCEPTED);
    problem(&api.get(&b, "/v1/intents/shared").await, 404, "key");
    let cancel = answer(
        api.client
            .post(format!("{}/v1/intents/shared/cancel", api.base))
            .bearer(&b)
            .send()
            .await
            .expect("c"),
    )
    .await;
    problem(&cancel, 404, "key");
    // The same key with another payload is B's own new intent, not a conflict that would reveal A's.
    let b_own = api
        .post(Some(&b), Some("shared"), "application/json", invoice(99))
        .await;
    assert_eq!(b_own.0, StatusCode::ACCEPTED, "{:?}", b_own.1);
    assert_eq!(
        api.get(&a, "/v1/intents/shared").await.1["status"],
        "pending",
        "A's intent untouched"
    );
    api.stop().await;
}

#[tokio::test]
async fn sixty_four_concurrent_identical_posts_make_one_intent() {
    let api = Api::start("concurrent").await;
    let t = api.token("tenant-a");
    let posts = (0..64).map(|_| api.post(Some(&t), Some("once"), "application/json", invoice(7)));
    let answers = futures_util::future::join_all(posts).await;
    let created = answers
        .iter()
        .filter(|a| a.0 == StatusCode::ACCEPTED)
        .count();
    let replayed = answers.iter().filter(|a| a.0 == StatusCode::OK).count();
    assert_eq!(
        (created, replayed),
        (1, 63),
        "{:?}",
        answers.iter().map(|a| a.0).collect::<Vec<_>>()
    );
    assert!(
        answers
            .iter()
            .all(|a| a.1["request_hash"] == answers[0].1["request_hash"]
                && a.1["idempotency_key"] == "once")
    );
    let mut db = PgConnection::connect(&api.db_url).await.expect("db");
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.intents")
        .fetch_one(&mut db)
        .await
        .expect("n");
    assert_eq!(n, 1);
    api.stop().await;
}

/// After 300 ms, a real worker starts delivering the API's intents to a reference receiver (which
/// honours keys): its record settles them and its NOTIFY wakes long-polls.
async fn deliver_soon(api: &Api) -> (oncebox_receiver::Receiver, Proc) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rx = oncebox_receiver::Receiver::start(oncebox_receiver::ReceiverConfig {
        honours_keys: true,
        ..Default::default()
    })
    .await
    .expect("receiver");
    let config = api.dir().join(format!("{}-worker.toml", api.db.name()));
    std::fs::write(
        &config,
        CONFIG.replace("http://127.0.0.1:9/invoices", &rx.url()),
    )
    .expect("worker config");
    let worker = Proc::spawn(
        Command::new(BIN)
            .args(["worker", "--config"])
            .arg(&config)
            .env("DATABASE_URL", &api.db_url)
            .env_remove("AMQP_URL")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "worker",
    );
    (rx, worker)
}

#[tokio::test]
async fn wait_returns_once_the_intent_is_terminal() {
    let api = Api::start("wait").await;
    let t = api.token("tenant-a");
    assert_eq!(
        api.post(Some(&t), Some("w1"), "application/json", invoice(1))
            .await
            .0,
        StatusCode::ACCEPTED
    );
    // Nobody delivers yet: without wait the answer is immediate and pending.
    assert_eq!(api.get(&t, "/v1/intents/w1").await.1["status"], "pending");
    // While a GET waits, a real worker delivers it to a receiver: its record wakes the waiter.
    let waiting = api.get(&t, "/v1/intents/w1?wait=30");
    // If NOTIFY did not wake the waiter, it would answer only at its 30 s deadline.
    let (got, (rx, worker)) = tokio::time::timeout(Duration::from_secs(15), async {
        tokio::join!(waiting, deliver_soon(&api))
    })
    .await
    .expect("the long poll was woken by the worker's NOTIFY, not by its deadline");
    assert_eq!(got.0, StatusCode::OK);
    assert_eq!(
        got.1["status"], "succeeded",
        "the long poll returned the terminal state"
    );
    assert_eq!(
        rx.effects()
            .get(&oncebox_core::delivery_key("tenant-a", "w1")),
        Some(&1),
        "delivered once"
    );
    assert!(worker.stop().await.success());
    api.stop().await;
}

#[tokio::test]
async fn ops_endpoints_need_an_ops_token_and_stay_in_their_tenant() {
    let api = Api::start("ops").await;
    let agent = api.token("tenant-a");
    let ops = api.token_with_role("tenant-a", "ops");
    let other_ops = api.token_with_role("tenant-b", "ops");
    assert_eq!(
        api.post(Some(&agent), Some("r1"), "application/json", invoice(1))
            .await
            .0,
        StatusCode::ACCEPTED
    );
    let mut db = PgConnection::connect(&api.db_url).await.expect("db");
    sqlx::query("UPDATE oncebox.intents SET status = 'needs_review'")
        .execute(&mut db)
        .await
        .expect("review");

    problem(
        &api.get(&agent, "/v1/ops/intents").await,
        403,
        "authorization",
    );
    let listed = api.get(&ops, "/v1/ops/intents?status=needs_review").await;
    assert_eq!(listed.0, StatusCode::OK, "{:?}", listed.1);
    assert_eq!(listed.1["intents"][0]["idempotency_key"], "r1");
    assert_eq!(
        api.get(&other_ops, "/v1/ops/intents").await.1["intents"],
        json!([]),
        "tenant B's ops see nothing of A"
    );
    problem(&api.get(&other_ops, "/v1/ops/intents/r1").await, 404, "key");
    problem(
        &api.get(&ops, "/v1/ops/intents?status=done").await,
        400,
        "status",
    );

    let resolve = |body: Value| {
        api.client
            .post(format!("{}/v1/ops/intents/r1/resolve", api.base))
            .bearer(&ops)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    problem(
        &answer(resolve(json!({"succeeded": false})).await.expect("r")).await,
        400,
        "reason",
    );
    // A reference with a failed resolution would be dropped: refused, as in `oncebox ops`.
    problem(
        &answer(
            resolve(json!({"succeeded": false, "reason": "r", "reference": "INV-1"}))
                .await
                .expect("r"),
        )
        .await,
        400,
        "reference",
    );
    let done = answer(
        resolve(json!({"succeeded": true, "reference": "INV-1"}))
            .await
            .expect("r"),
    )
    .await;
    assert_eq!(done.0, StatusCode::OK, "{:?}", done.1);
    assert_eq!(
        (
            done.1["status"].as_str(),
            done.1["external_reference"].as_str()
        ),
        (Some("succeeded"), Some("INV-1"))
    );
    let retry = answer(
        api.client
            .post(format!("{}/v1/ops/intents/r1/retry", api.base))
            .bearer(&ops)
            .send()
            .await
            .expect("retry"),
    )
    .await;
    problem(&retry, 409, "key");
    let shown = api.get(&ops, "/v1/ops/intents/r1").await;
    assert_eq!(shown.1["history"][0]["outcome"], "operator_resolved");
    // The decision is audited with the principal of the token that made it (its holder); the
    // refused retry is not.
    let mut conn = PgConnection::connect(&api.db_url).await.expect("db");
    let audit: Vec<(String, String, String, String)> =
        sqlx::query_as("SELECT actor, role, via, action FROM oncebox.audit ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .expect("audit");
    let holder: (String,) = sqlx::query_as(
        "SELECT holder FROM oncebox.api_tokens WHERE role = 'ops' AND tenant_id = 'tenant-a'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("token holder");
    assert_eq!(
        audit,
        [(
            format!("user:{}", holder.0),
            "ops".to_owned(),
            "api".to_owned(),
            "resolve".to_owned()
        )]
    );
    api.stop().await;
}

/// `POST /v1/ops/intents/{key}/{decision}` with `body` as `token`.
async fn decide(
    api: &Api,
    token: &str,
    key: &str,
    decision: &str,
    body: Value,
) -> (StatusCode, Value, String) {
    answer(
        api.client
            .post(format!("{}/v1/ops/intents/{key}/{decision}", api.base))
            .bearer(token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("decision"),
    )
    .await
}

#[tokio::test]
async fn approvals_take_four_eyes_and_stay_in_their_tenant() {
    let api = Api::start("approvals").await;
    let agent = api.token("tenant-a");
    let submitter = api.token_with_role("tenant-a", "ops");
    let other_tenant = api.token_with_role("tenant-b", "ops");
    let label = |name: &str| {
        let holder = format!("{name}@example.com");
        let out = run_ok(
            Command::new(BIN)
                .args([
                    "ops", "token", "create", "--tenant", "tenant-a", "--role", "ops", "--label",
                    name, "--holder", &holder,
                ])
                .env("DATABASE_URL", &api.db_url),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let (ana, bo) = (label("ana"), label("bo"));
    // Ana's second token: the same holder, so the same principal.
    let ana_again = label("ana");
    let payout =
        |amount: &str| json!({"action": "payout", "arguments": {"amount": amount}}).to_string();
    let big = api
        .post(
            Some(&submitter),
            Some("p1"),
            "application/json",
            payout("5000.00"),
        )
        .await;
    assert_eq!(big.0, StatusCode::ACCEPTED, "{:?}", big.1);
    assert_eq!(big.1["status"], "awaiting_approval");
    let small = api
        .post(Some(&agent), Some("p2"), "application/json", payout("50"))
        .await;
    assert_eq!(small.1["status"], "pending", "{:?}", small.1);
    // A wait returns on it at once: the agent tells "waiting for people" from "slow".
    let waited = api.get(&agent, "/v1/intents/p1?wait=30").await;
    assert_eq!(waited.1["status"], "awaiting_approval");
    let client = oncebox_client::Client::new(&api.base, &agent).expect("client");
    let waited = client
        .wait("p1", std::time::Duration::from_secs(60))
        .await
        .expect("wait");
    assert_eq!(waited.status, oncebox_client::Status::AwaitingApproval);
    assert!(waited.is_settled() && waited.waits_for_a_person());

    let reason = json!({"reason": "checked the ledger"});
    problem(
        &decide(&api, &agent, "p1", "approve", reason.clone()).await,
        403,
        "authorization",
    );
    problem(
        &decide(&api, &other_tenant, "p1", "approve", reason.clone()).await,
        404,
        "key",
    );
    problem(
        &decide(&api, &other_tenant, "p1", "reject", reason.clone()).await,
        404,
        "key",
    );
    let own = decide(&api, &submitter, "p1", "approve", reason.clone()).await;
    problem(&own, 409, "key");
    assert!(
        own.1["detail"]
            .as_str()
            .is_some_and(|d| d.contains("someone else must approve it")),
        "{:?}",
        own.1
    );
    let first = decide(&api, &ana, "p1", "approve", reason.clone()).await;
    assert_eq!(
        (first.0, first.1["status"].as_str()),
        (StatusCode::OK, Some("awaiting_approval"))
    );
    for token in [&ana, &ana_again] {
        let again = decide(&api, token, "p1", "approve", reason.clone()).await;
        problem(&again, 409, "key");
        assert!(
            again.1["detail"]
                .as_str()
                .is_some_and(|d| d.contains("one person counts once")),
            "{:?}",
            again.1
        );
    }
    let second = decide(&api, &bo, "p1", "approve", json!({})).await;
    assert_eq!(
        (second.0, second.1["status"].as_str()),
        (StatusCode::OK, Some("pending"))
    );

    let doomed = api
        .post(Some(&agent), Some("p3"), "application/json", payout("1000"))
        .await;
    assert_eq!(doomed.1["status"], "awaiting_approval");
    problem(
        &decide(&api, &ana, "p3", "reject", json!({})).await,
        400,
        "reason",
    );
    let rejected = decide(&api, &ana, "p3", "reject", json!({"reason": "duplicate"})).await;
    assert_eq!(rejected.1["status"], "rejected", "{:?}", rejected.1);
    assert_eq!(
        api.get(&agent, "/v1/intents/p3?wait=30").await.1["status"],
        "rejected"
    );
    let waited = client
        .wait("p3", std::time::Duration::from_secs(60))
        .await
        .expect("wait");
    assert_eq!(waited.status, oncebox_client::Status::Rejected);
    assert!(waited.is_settled() && !waited.waits_for_a_person());
    // Tenant B's ops token sees none of A's approvals either.
    let listed = api
        .get(&other_tenant, "/v1/ops/intents?status=awaiting_approval")
        .await;
    assert_eq!(listed.1["intents"], json!([]));

    // The audit names each person by principal (the token's holder) and label, with the reason.
    let mut conn = PgConnection::connect(&api.db_url).await.expect("db");
    let audit: Vec<(String, Option<String>, String, Option<String>)> =
        sqlx::query_as("SELECT actor, label, action, reason FROM oncebox.audit ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .expect("audit");
    let labels: Vec<(Option<&str>, &str)> = audit
        .iter()
        .map(|a| (a.1.as_deref(), a.2.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            (Some("ana"), "approve"),
            (Some("bo"), "approve"),
            (Some("ana"), "reject")
        ]
    );
    assert_eq!(audit[0].3.as_deref(), Some("checked the ledger"));
    let actors: Vec<&str> = audit.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(
        actors,
        [
            "user:ana@example.com",
            "user:bo@example.com",
            "user:ana@example.com"
        ]
    );
    api.stop().await;
}

/// Whether an answer with `content_type` and `body` is what `response` (an operation's
/// documented response, or a `$ref` to one of the document's reusable responses) promises: the
/// media type is listed, and a JSON body validates against its schema, with the document's
/// components to resolve references.
fn answers_as_documented(
    spec: &Value,
    response: &Value,
    content_type: &str,
    body: &str,
) -> Result<(), String> {
    let response = match response["$ref"].as_str() {
        Some(r) => spec
            .pointer(r.trim_start_matches('#'))
            .ok_or(format!("{r} names no response"))?,
        None => response,
    };
    let media = content_type.split(';').next().unwrap_or_default().trim();
    let content = response["content"]
        .get(media)
        .ok_or(format!("content type {media:?} is not documented"))?;
    let Some(schema) = content.get("schema") else {
        return Ok(());
    };
    let mut root = schema.clone();
    root["components"] = spec["components"].clone();
    let validator = jsonschema::draft202012::new(&root).map_err(|e| e.to_string())?;
    let body: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(&body)
        .map(|e| e.to_string())
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

#[tokio::test]
async fn every_documented_operation_answers_with_a_documented_status() {
    let api = Api::start("openapi").await;
    let agent = api.token("tenant-a");
    let ops = api.token_with_role("tenant-a", "ops");
    let spec = api
        .client
        .get(format!("{}/openapi.json", api.base))
        .send()
        .await
        .expect("spec");
    assert_eq!(spec.status(), StatusCode::OK);
    let spec: Value =
        serde_json::from_str(&spec.text().await.expect("body")).expect("the spec is JSON");
    assert_eq!(spec["openapi"], "3.1.0");
    assert_eq!(
        api.post(Some(&agent), Some("doc-1"), "application/json", invoice(1))
            .await
            .0,
        StatusCode::ACCEPTED
    );
    let mut calls = 0;
    for (path, ops_of_path) in spec["paths"].as_object().expect("paths") {
        for (method, op) in ops_of_path.as_object().expect("operations") {
            let url = format!("{}{}", api.base, path.replace("{key}", "doc-1"));
            let token = if path.starts_with("/v1/ops") {
                &ops
            } else {
                &agent
            };
            // Each operation as its caller would send it, and, unless it is open to all,
            // without a token (a refusal, whose body must be the documented problem too).
            let open = op["security"] == json!([{}]);
            for token in [Some(token), None] {
                if token.is_none() && open {
                    continue;
                }
                let req = match method.as_str() {
                    "get" => api.client.get(&url),
                    "post" => api.client.post(&url),
                    other => panic!("undocumented method handling: {other}"),
                }
                .header("idempotency-key", "doc-2")
                .header("content-type", "application/json")
                .body(if path == "/v1/intents" {
                    invoice(2)
                } else if path.ends_with("/resolve") {
                    json!({"succeeded": true}).to_string()
                } else {
                    String::new()
                });
                let req = match token {
                    Some(t) => req.bearer(t),
                    None => req,
                };
                let answer = req.send().await.expect("call");
                let status = answer.status().as_u16().to_string();
                let content_type = answer
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let body = answer.text().await.expect("body");
                let documented = op["responses"].as_object().expect("responses");
                let Some(response) = documented.get(&status) else {
                    panic!(
                        "{method} {path} answered {status}, documented {:?}",
                        documented.keys().collect::<Vec<_>>()
                    );
                };
                answers_as_documented(&spec, response, &content_type, &body)
                    .unwrap_or_else(|e| panic!("{method} {path} answered {status}: {e}\n{body}"));
                calls += usize::from(token.is_some());
            }
        }
    }
    assert_eq!(
        calls, 13,
        "every operation of the router is documented and called"
    );
    let metrics = api
        .client
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metric(
            &metrics,
            "oncebox_api_requests_total{method=\"POST\",route=\"/v1/intents\",status=\"202\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    assert!(
        !metrics.contains("doc-1"),
        "keys never appear in metric labels"
    );
    api.stop().await;
}

/// What the proxy in front of the API does to the first few connections.
#[derive(Clone, Copy)]
enum Fault {
    /// Forward the request, let the server answer, then cut both sides before the answer
    /// reaches the client: the server has committed, the client saw nothing.
    DropAnswer,
    /// Never forward; answer 503 with `Retry-After: 0` as an overloaded gateway would.
    Gateway503,
}

/// A TCP proxy to the API that applies `fault` to its first `faulty` connections and passes the
/// rest through. Counts connections.
struct FaultyProxy {
    base: String,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl FaultyProxy {
    async fn start(upstream: &str, fault: Fault, faulty: usize) -> FaultyProxy {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    if n >= faulty {
                        let mut server = tokio::net::TcpStream::connect(&upstream)
                            .await
                            .expect("upstream");
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        return;
                    }
                    match fault {
                        Fault::DropAnswer => {
                            let server = tokio::net::TcpStream::connect(&upstream)
                                .await
                                .expect("upstream");
                            let (mut from_server, mut to_server) = server.into_split();
                            let (mut from_client, _to_client) = client.into_split();
                            tokio::spawn(async move {
                                let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
                            });
                            // The first bytes of the answer mean the server is done; drop them
                            // and both connections.
                            let mut buf = [0u8; 1];
                            let _ = from_server.read(&mut buf).await;
                        }
                        Fault::Gateway503 => {
                            let mut buf = [0u8; 4096];
                            let _ = client.read(&mut buf).await;
                            let body = r#"{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"gateway overloaded"}"#;
                            let answer = format!(
                                "HTTP/1.1 503 Service Unavailable\r\nretry-after: 0\r\ncontent-type: application/problem+json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                                body.len()
                            );
                            let _ = client.write_all(answer.as_bytes()).await;
                        }
                    }
                });
            }
        });
        FaultyProxy { base, connections }
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

async fn intents_in(db_url: &str) -> (i64, i64) {
    let mut db = PgConnection::connect(db_url).await.expect("db");
    sqlx::query_as("SELECT (SELECT count(*) FROM oncebox.intents), (SELECT count(*) FROM oncebox.outbox WHERE phase = 'deliver')")
        .fetch_one(&mut db)
        .await
        .expect("count")
}

fn quick_retries() -> oncebox_client::RetryConfig {
    oncebox_client::RetryConfig {
        max_attempts: 5,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(100),
    }
}

#[tokio::test]
async fn the_client_retries_lost_answers_under_one_key() {
    use oncebox_client::{Client, ClientError, Status, Submit};
    let api = Api::start("client_lost").await;
    let t = api.token("tenant-a");
    let request = Submit::new(
        "create_invoice",
        json!({"order_id": "order-1", "amount": "10.00"}),
    )
    .business_ref("order-1");

    // Two answers lost after the server committed: the third try gets the same intent back.
    let proxy = FaultyProxy::start(&api.base, Fault::DropAnswer, 2).await;
    let client = Client::new(&proxy.base, &t)
        .expect("client")
        .with_retry(quick_retries());
    let submitted = client.submit("c-1", &request).await.expect("submit");
    assert_eq!(proxy.connections(), 3, "two lost answers, one retry each");
    assert!(
        !submitted.created,
        "the first try created it; the retry is a replay"
    );
    assert_eq!(submitted.intent.idempotency_key, "c-1");
    assert_eq!(submitted.intent.status, Status::Pending);
    assert_eq!(submitted.intent.business_ref.as_deref(), Some("order-1"));
    assert_eq!(
        intents_in(&api.db_url).await,
        (1, 1),
        "one intent, one outbox row"
    );

    // 503s never reached the server: the try that did creates it.
    let proxy = FaultyProxy::start(&api.base, Fault::Gateway503, 2).await;
    let client = Client::new(&proxy.base, &t)
        .expect("client")
        .with_retry(quick_retries());
    let other = Submit::new(
        "create_invoice",
        json!({"order_id": "order-2", "amount": "10.00"}),
    );
    let submitted = client.submit("c-2", &other).await.expect("submit");
    assert!(submitted.created);
    assert_eq!(proxy.connections(), 3);
    assert_eq!(intents_in(&api.db_url).await, (2, 2));

    // Refusals are not retried and name the field.
    let direct = Client::new(&api.base, &t)
        .expect("client")
        .with_retry(quick_retries());
    let e = client
        .submit("c-1", &other)
        .await
        .expect_err("another request under c-1");
    let p = e.problem().expect("a problem document");
    assert_eq!(
        (p.status, p.field.as_deref()),
        (422, Some("Idempotency-Key"))
    );
    let metrics = api
        .client
        .get(format!("{}/metrics", api.base))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics");
    assert_eq!(
        metric(
            &metrics,
            r#"oncebox_api_requests_total{method="POST",route="/v1/intents",status="422"}"#
        ),
        Some(1.0),
        "the server saw the refused request once: a 422 is not retried\n{metrics}"
    );
    let e = direct
        .submit("c-3", &Submit::new("send_email", json!({})))
        .await
        .expect_err("unknown action");
    assert_eq!(e.problem().map(|p| p.status), Some(422));
    assert!(matches!(
        direct.submit("a b", &request).await,
        Err(ClientError::Invalid {
            field: "idempotency_key",
            ..
        })
    ));
    assert_eq!(
        intents_in(&api.db_url).await,
        (2, 2),
        "refusals write nothing"
    );

    // get, 404, cancel (twice: the second finds it cancelled), wait.
    let got = direct.get("c-1").await.expect("get");
    assert_eq!(
        got.request_hash,
        oncebox_core::request_hash(
            "create_invoice",
            &json!({"order_id": "order-1", "amount": "10.00"})
        ),
        "the intent under c-1 is the request the client sent"
    );
    let e = direct.get("nope").await.expect_err("404");
    assert_eq!(e.problem().map(|p| p.status), Some(404));
    let cancelled = direct.cancel("c-2").await.expect("cancel");
    assert_eq!(cancelled.status, Status::Cancelled);
    assert_eq!(
        direct.cancel("c-2").await.expect("cancel again").status,
        Status::Cancelled
    );
    let settled = direct
        .wait("c-2", Duration::from_secs(30))
        .await
        .expect("wait");
    assert!(settled.is_settled());
    let pending = direct
        .wait("c-1", Duration::from_secs(1))
        .await
        .expect("wait");
    assert_eq!(
        pending.status,
        Status::Pending,
        "nobody delivers: the wait ends at its timeout"
    );
    let waiting = direct.wait("c-1", Duration::from_secs(30));
    let (done, (rx, worker)) = tokio::time::timeout(Duration::from_secs(15), async {
        tokio::join!(waiting, deliver_soon(&api))
    })
    .await
    .expect("woken by the worker's NOTIFY");
    assert_eq!(done.expect("wait").status, Status::Succeeded);
    assert_eq!(
        rx.effects()
            .get(&oncebox_core::delivery_key("tenant-a", "c-1")),
        Some(&1)
    );
    assert!(worker.stop().await.success());

    // No server at all: the transport error after every try, saying how many.
    let closed = free_addr();
    let nobody = Client::new(&format!("http://{closed}"), &t)
        .expect("client")
        .with_retry(oncebox_client::RetryConfig {
            max_attempts: 2,
            ..quick_retries()
        });
    match nobody.get("c-1").await {
        Err(ClientError::Transport { attempts: 2, .. }) => {}
        other => panic!("expected a transport error after 2 attempts, got {other:?}"),
    }
    api.stop().await;
}

/// schemathesis, driven by the served /openapi.json, with an ops token so that every operation
/// is reachable: examples, coverage (boundary and negative values), fuzzing and stateful runs
/// (submit, then read, cancel, retry, resolve what was submitted). Any 5xx, any answer outside
/// the documented statuses, content types or schemas, any schema-invalid request accepted or a
/// missing auth accepted fails the test. Not checked: `positive_data_acceptance`, because a
/// schema-valid request is still refused when it reuses a key with another payload (422), holds
/// a number beyond ±2^53 (400) or cancels what has been dispatched (409) — rules no JSON Schema
/// can state. The seed is fixed so that a finding reproduces; ONCEBOX_FUZZ_SEED picks another.
/// The API runs without request rates: schemathesis sends hundreds of requests a second, and a
/// 429 in place of the answer a case checks (a missing header's 400) is a finding about its
/// pace, not the API's; the rates have tests of their own.
#[tokio::test]
async fn schemathesis_finds_no_server_error_and_no_schema_violation() {
    let st = pytools().join("schemathesis");
    let api = Api::start_with("fuzz", &["--token-rate", "0", "--tenant-rate", "0"]).await;
    let token = api.token_with_role("tenant-a", "ops");
    let seed = std::env::var("ONCEBOX_FUZZ_SEED").unwrap_or_else(|_| "20261130".into());
    let out = tokio::process::Command::new(st)
        .args(["run", &format!("{}/openapi.json", api.base)])
        .args([
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
        ])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["--max-examples", "50", "--workers", "1", "--seed", &seed])
        .env("NO_COLOR", "1")
        // schemathesis keeps a cache of findings in the working directory: not in the repository.
        .current_dir(std::env::temp_dir())
        .output()
        .await
        .expect("schemathesis runs");
    let report = String::from_utf8_lossy(&out.stdout);
    let tail: String = report
        .lines()
        .rev()
        .take(80)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        out.status.success(),
        "schemathesis found problems (seed {seed}):\n{tail}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        report.contains("Tested: 12"),
        "every operation was tested:\n{tail}"
    );
    // Past the harness's capture, so that CI logs show how much was tried.
    let tried: String = report.lines().filter(|l| l.contains("generated")).collect();
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("schemathesis (seed {seed}): {}\n", tried.trim()).as_bytes(),
    );
    api.stop().await;
}

#[tokio::test]
async fn a_revoked_token_is_refused_once_the_cache_expires() {
    let api = Api::start("revoke").await;
    let t = api.token("tenant-a");
    // A 404 for an unknown key means the token was accepted (and is now cached).
    problem(&api.get(&t, "/v1/intents/none").await, 404, "key");
    let revoke = |token: &str| {
        Command::new(BIN)
            .args(["ops", "token", "revoke", token])
            .env("DATABASE_URL", &api.db_url)
            .output()
            .expect("revoke")
    };
    let first = revoke(&t);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(
        revoke(&t).status.code(),
        Some(4),
        "already revoked: no live token"
    );
    assert_eq!(revoke("obx_unknown").status.code(), Some(4));
    let revoked = std::time::Instant::now();
    loop {
        let (status, _, _) = api.get(&t, "/v1/intents/none").await;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert!(
            revoked.elapsed() < oncebox_api::TOKEN_CACHE_TTL + Duration::from_secs(3),
            "a revoked token is still accepted {:?} after revocation",
            revoked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Another token of the tenant is unaffected.
    let other = api.token("tenant-a");
    problem(&api.get(&other, "/v1/intents/none").await, 404, "key");
    api.stop().await;
}

/// Tokens have lifetimes and labels: one created with `--expires-in` stops working at its
/// expiry whatever the API's cache holds; `token list` shows label, expiry and last use (never
/// the secret); `token revoke --label` revokes every live token of a label (a rotation), and
/// `--id` one.
#[tokio::test]
async fn tokens_expire_and_are_listed_and_revoked_by_label_or_id() {
    let api = Api::start("token_life").await;
    let ops = |args: &[&str]| {
        let out = run_ok(
            Command::new(BIN)
                .args(["ops", "token"])
                .args(args)
                .arg("--json")
                .env("DATABASE_URL", &api.db_url),
        );
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let created = ops(&[
        "create",
        "--tenant",
        "tenant-a",
        "--label",
        "ci",
        "--expires-in",
        "3s",
    ]);
    let token = created["token"].as_str().expect("token").to_owned();
    let born = std::time::Instant::now();
    problem(&api.get(&token, "/v1/intents/none").await, 404, "key");
    let listed = ops(&["list", "--tenant", "tenant-a"]);
    let row = &listed[0];
    assert_eq!((&row["id"], &row["label"]), (&created["id"], &json!("ci")));
    assert!(
        row["expires_at"].is_string() && row["last_used_at"].is_string(),
        "{row}"
    );
    assert!(!listed.to_string().contains(&token), "never the secret");
    loop {
        if api.get(&token, "/v1/intents/none").await.0 == StatusCode::UNAUTHORIZED {
            break;
        }
        assert!(
            born.elapsed() < Duration::from_secs(5),
            "a token that expires after 3 s is accepted {:?} after creation",
            born.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        born.elapsed() >= Duration::from_secs(2),
        "it worked until its expiry"
    );

    // A rotation: the old tokens share a label; one revoke ends them all.
    let old: Vec<String> = (0..2)
        .map(|_| {
            ops(&["create", "--tenant", "tenant-a", "--label", "2026-11"])["token"]
                .as_str()
                .expect("token")
                .to_owned()
        })
        .collect();
    let keep = ops(&["create", "--tenant", "tenant-a", "--label", "2026-12"]);
    assert_eq!(
        ops(&["revoke", "--label", "2026-11"])["revoked"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(
        ops(&["revoke", "--id", &keep["id"].to_string()])["revoked"],
        json!([keep["id"]])
    );
    for t in &old {
        assert_eq!(
            api.get(t, "/v1/intents/none").await.0,
            StatusCode::UNAUTHORIZED,
            "never cached"
        );
    }
    assert_eq!(
        ops(&["list", "--tenant", "tenant-a"]),
        json!([]),
        "no live token is left"
    );
    api.stop().await;
}

/// Request rates are limited per token and per tenant: a token that floods gets 429 with
/// Retry-After (problem+json) once its burst is spent; another token of the same tenant is then
/// held by the tenant's limit; another tenant's requests all pass. The buckets refill a request
/// per 100 s, so the counts are exact however slowly the machine answers.
#[tokio::test]
async fn a_flooding_token_is_limited_while_another_tenant_passes() {
    let api = Api::start_with(
        "rates",
        &[
            "--token-rate",
            "0.01",
            "--token-burst",
            "10",
            "--tenant-rate",
            "0.01",
            "--tenant-burst",
            "15",
        ],
    )
    .await;
    let (a1, a2, b) = (
        api.token("tenant-a"),
        api.token("tenant-a"),
        api.token("tenant-b"),
    );
    let statuses = |token: String, n: usize| {
        let api = &api;
        async move {
            let mut out = Vec::new();
            for _ in 0..n {
                let r = api
                    .client
                    .get(format!("{}/v1/intents/none", api.base))
                    .bearer(&token)
                    .send()
                    .await
                    .expect("GET");
                let retry_after = header(&r, "retry-after").and_then(|v| v.parse::<u64>().ok());
                out.push((answer(r).await, retry_after));
            }
            out
        }
    };
    let flood = statuses(a1, 30).await;
    let refused: Vec<_> = flood
        .iter()
        .filter(|(a, _)| a.0 == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(
        refused.len(),
        20,
        "the token's burst of 10 passed, the rest was refused"
    );
    for (a, retry_after) in &refused {
        problem(a, 429, "authorization");
        assert!(
            a.1["detail"].as_str().is_some_and(|d| d.contains("token")),
            "{:?}",
            a.1
        );
        assert!(
            retry_after.is_some_and(|s| s >= 1),
            "Retry-After: {retry_after:?}"
        );
    }
    // The tenant's bucket (15) lost what the first token was allowed (10), and nothing for its
    // refused requests: 5 of the second token's pass.
    let same_tenant = statuses(a2, 12).await;
    let by_tenant = same_tenant
        .iter()
        .filter(|(a, _)| a.1["detail"].as_str().is_some_and(|d| d.contains("tenant")))
        .count();
    assert_eq!(
        by_tenant, 7,
        "5 of 12 passed, the rest refused by the tenant's limit"
    );
    for (a, _) in statuses(b, 10).await {
        assert_eq!(
            a.0,
            StatusCode::NOT_FOUND,
            "another tenant passes: {:?}",
            a.1
        );
    }
    api.stop().await;
}

/// Where there is no ingress, `oncebox serve` terminates TLS itself: a client that trusts the
/// certificate's issuer gets its answers over HTTPS (bearer token included), and a plain-HTTP
/// client gets nothing.
#[tokio::test]
async fn the_api_serves_https_with_its_own_certificate() {
    let dir = std::env::temp_dir().join(format!("oncebox-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    // A CA of the test's own, and a server certificate it signed for localhost.
    let file = |name: &str| dir.join(name).to_str().expect("utf-8").to_owned();
    let (ca, ca_key, cert, key, csr, ext) = (
        file("ca.pem"),
        file("ca.key"),
        file("cert.pem"),
        file("key.pem"),
        file("leaf.csr"),
        file("leaf.ext"),
    );
    std::fs::write(
        &ext,
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         extendedKeyUsage=serverAuth\n",
    )
    .expect("ext");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let openssl = |args: &[&str]| run_ok(Command::new("openssl").args(args));
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-days", "1", "-subj", "/CN=oncebox test CA"],
            &["-keyout", &ca_key, "-out", &ca],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &["-subj", "/CN=localhost", "-keyout", &key, "-out", &csr],
        ]
        .concat(),
    );
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &ext,
        "-out",
        &cert,
    ]);
    let api = Api::start_with("tls", &["--tls-cert", &cert, "--tls-key", &key]).await;
    let token = api.token("tenant-a");
    let https = api.base.replace("http://", "https://");
    let client = reqwest::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&ca).expect("ca")).expect("pem"),
        )
        .build()
        .expect("client");
    let healthz = client
        .get(format!("{https}/healthz"))
        .send()
        .await
        .expect("over TLS");
    assert_eq!(healthz.status(), StatusCode::OK);
    let (status, body, _) = answer(
        client
            .get(format!("{https}/v1/intents/none"))
            .bearer(&token)
            .send()
            .await
            .expect("over TLS"),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the token was accepted: {body}"
    );
    let plain = reqwest::Client::new()
        .get(format!("{}/healthz", api.base))
        .send()
        .await;
    assert!(
        plain.is_err(),
        "plain HTTP to a TLS port answers nothing: {plain:?}"
    );
    let untrusted = reqwest::Client::new()
        .get(format!("{https}/healthz"))
        .send()
        .await;
    assert!(
        untrusted.is_err(),
        "a client that does not trust the issuer refuses: {untrusted:?}"
    );
    // A key that is not the certificate's stops start-up, naming the field.
    let bad = Command::new(BIN)
        .args([
            "serve",
            "--json",
            "--config",
            "/dev/null",
            "--listen",
            &free_addr(),
        ])
        .args(["--tls-cert", &cert, "--tls-key", &ca_key])
        .env("DATABASE_URL", &api.db_url)
        .output()
        .expect("serve");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(String::from_utf8_lossy(&bad.stderr).contains("tls_cert"));
    api.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// No client holds a connection for as long as it likes: silent, half-sent and idle keep-alive
/// connections are closed after `--http-header-timeout`, at most `--http-max-connections` are
/// served at once, and `/healthz` keeps answering meanwhile.
#[tokio::test]
async fn idle_and_half_sent_connections_are_closed_and_capped() {
    let api = Api::start_with(
        "linger",
        &[
            "--http-header-timeout",
            "2s",
            "--http-max-connections",
            "64",
        ],
    )
    .await;
    let addr = api.base.trim_start_matches("http://").to_owned();
    assert_lingering_connections_closed(&addr, 15, Duration::from_secs(2)).await;
    assert_connection_cap(&addr, 64, Duration::from_secs(2)).await;
    api.stop().await;
}

/// Made-up methods and paths cannot grow `/metrics`: an outside check added 2,000 series with
/// 2,000 methods (and 8 MB scrapes with 4,000-character ones). Methods outside the known set
/// count as `other`, paths no route matches as `unmatched`.
#[tokio::test]
async fn made_up_methods_and_paths_do_not_grow_the_metrics() {
    let api = Api::start("labels").await;
    let series = |body: &str| {
        body.lines()
            .filter(|l| l.starts_with("oncebox_api_requests_total{"))
            .count()
    };
    let send = |method: String, path: &str| {
        let request = api
            .client
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).expect("a valid token"),
                format!("{}{path}", api.base),
            )
            .send();
        async move { request.await.expect("answered").status() }
    };
    // One of each kind first, so that their series exist.
    send("MADEUP".into(), "/healthz").await;
    send("MADEUP".into(), "/no/such/path").await;
    send("GET".into(), "/no/such/path/either").await;
    let scrape = || async {
        api.client
            .get(format!("{}/metrics", api.base))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("body")
    };
    scrape().await; // A scrape is counted too: its own series exists from now on.
    let before = scrape().await;
    for i in 0..1000 {
        let method = format!("M{i}{}", "X".repeat(i % 7 * 500));
        let path = format!("/made/up/{i}");
        let status = send(method, if i % 2 == 0 { "/healthz" } else { &path }).await;
        assert!(status.is_client_error(), "{status}");
    }
    let after = scrape().await;
    assert_eq!(series(&after), series(&before), "{after}");
    assert!(
        after.len() < before.len() + 200,
        "the scrape did not grow: {} → {} bytes",
        before.len(),
        after.len()
    );
    assert!(
        after.contains(r#"method="other",route="/healthz",status="405""#),
        "{after}"
    );
    assert!(after.contains(r#"route="unmatched""#), "{after}");
    api.stop().await;
}

/// Every error is problem+json, an unknown path and a wrong method included (they used to be
/// empty answers with no content type).
#[tokio::test]
async fn unknown_paths_and_wrong_methods_are_problem_json() {
    let api = Api::start("fallbacks").await;
    let t = api.token("tenant-a");
    problem(&api.get(&t, "/v2/nothing").await, 404, "path");
    let r = api
        .client
        .delete(format!("{}/v1/intents", api.base))
        .bearer(&t)
        .send()
        .await
        .expect("DELETE");
    let allow = header(&r, "allow").unwrap_or_default();
    assert!(allow.contains("POST"), "Allow: {allow:?}");
    problem(&answer(r).await, 405, "method");
    api.stop().await;
}

/// An MCP client of `api` for `token` over streamable HTTP (rmcp's client), declaring the
/// tasks extension when `tasks`.
async fn mcp_client(
    api: &Api,
    token: &str,
    tasks: bool,
) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
    use rmcp::ServiceExt;
    use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let capabilities = if tasks {
        ClientCapabilities::builder().enable_tasks().build()
    } else {
        ClientCapabilities::default()
    };
    let info = ClientConfig::new(capabilities, Implementation::new("api-test", "1"));
    let transport = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", api.base))
        .auth_header(token);
    info.serve(StreamableHttpClientTransport::from_config(transport))
        .await
        .expect("MCP initialize")
}

/// A `create_invoice` call at step `step` of run "run-1".
fn invoice_call(step: u32) -> rmcp::model::CallToolRequestParams {
    use rmcp::model::{CallToolRequestParams, MetaObject, RequestMetaObject};
    let mut call = CallToolRequestParams::new("create_invoice").with_arguments(
        json!({"amount": 1})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let meta = json!({"oncebox.dev/run_id": "run-1", "oncebox.dev/step": step.to_string()});
    call.meta = Some(RequestMetaObject(MetaObject(
        meta.as_object().cloned().unwrap_or_default(),
    )));
    call
}

#[tokio::test]
async fn an_mcp_client_with_tasks_follows_a_call_still_on_its_way_as_a_task() {
    use rmcp::model::{CallToolResponse, CancelTaskParams, GetTaskParams, TaskStatus};
    let api = Api::start_with("mcp_tasks", &["--tool-wait", "200ms"]).await;
    let token = api.token("tenant-a");
    let client = mcp_client(&api, &token, true).await;
    let caps = client.peer_info().map(|i| i.capabilities.supports_tasks());
    assert_eq!(caps, Some(true), "initialize says the gateway serves tasks");
    // Nobody delivers yet: past the tool wait, the call is a task named by the intent's key.
    let task = |r: CallToolResponse| match r {
        CallToolResponse::Task(t) => t.task,
        other => panic!("expected a task: {other:?}"),
    };
    let first = task(client.call_tool_once(invoice_call(1)).await.expect("call"));
    let key = oncebox_core::step_key("run-1", 1, "create_invoice", &json!({"amount": 1}));
    assert_eq!(
        (first.task_id.as_str(), first.status),
        (key.as_str(), TaskStatus::Working)
    );
    let again = task(client.call_tool_once(invoice_call(1)).await.expect("call"));
    assert_eq!(again.task_id, key, "a retried call is the same task");
    let get = async |id: &str| {
        let params = GetTaskParams::new(id);
        client.get_task(params).await.expect("tasks/get").task
    };
    assert_eq!(get(&key).await.status(), TaskStatus::Working);
    // A second call is cancelled before anyone dispatched it.
    let second = task(client.call_tool_once(invoice_call(2)).await.expect("call"));
    client
        .cancel_task(CancelTaskParams::new(second.task_id.clone()))
        .await
        .expect("tasks/cancel");
    assert_eq!(get(&second.task_id).await.status(), TaskStatus::Cancelled);
    // Another tenant has no such task.
    let other = mcp_client(&api, &api.token("tenant-b"), true).await;
    assert!(
        other
            .get_task(GetTaskParams::new(key.clone()))
            .await
            .is_err()
    );
    // A call that awaits approval by people is a task still working — it completes once they
    // decided — and tasks/cancel of it is refused: a person rejects it, not the agent.
    let big = rmcp::model::CallToolRequestParams::new("payout").with_arguments(
        json!({"amount": "5000.00"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    let waiting = task(client.call_tool_once(big).await.expect("call"));
    assert_eq!(waiting.status, TaskStatus::Working);
    let cancel = client
        .cancel_task(CancelTaskParams::new(waiting.task_id.clone()))
        .await
        .expect_err("tasks/cancel of an intent awaiting approval");
    assert!(cancel.to_string().contains("awaits approval"), "{cancel}");
    let still = get(&waiting.task_id).await;
    assert_eq!(
        (still.status(), still.task.status_message.as_deref()),
        (TaskStatus::Working, Some("the intent is awaiting_approval"))
    );
    // A worker delivers the first: the task completes with the call's result, one effect.
    let (rx, worker) = deliver_soon(&api).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let done = loop {
        let t = get(&key).await;
        if t.status() != TaskStatus::Working {
            break t;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task never completed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let rmcp::model::TaskPayload::Completed { result } = &done.payload else {
        panic!("expected a completed task: {done:?}");
    };
    assert_eq!(
        result["structuredContent"]["status"], "succeeded",
        "{result:?}"
    );
    assert_eq!(
        rx.effects()
            .get(&oncebox_core::delivery_key("tenant-a", &key)),
        Some(&1)
    );
    // A client without the extension gets results, never tasks.
    let plain = mcp_client(&api, &token, false).await;
    let result = plain.call_tool(invoice_call(1)).await.expect("call");
    assert_eq!(
        result
            .structured_content
            .as_ref()
            .map(|c| c["status"].clone()),
        Some(json!("succeeded"))
    );
    // The tool result is the intent as the API shows it: one view, field for field.
    let (_, read, _) = api.get(&token, &format!("/v1/intents/{key}")).await;
    assert_eq!(result.structured_content.as_ref(), Some(&read));
    worker.stop().await;
    api.stop().await;
}

/// Two tenants, one key: over the API, and through the MCP gateway with the same tool call
/// (no key, no run: the same call identity in both tenants), each tenant's intent is its own
/// effect at a receiver that honours keys, and each reads back its own object.
#[tokio::test]
async fn two_tenants_with_one_key_get_two_effects_over_the_api_and_mcp() {
    use rmcp::model::CallToolRequestParams;
    let api = Api::start("one_key").await;
    let tenants = [
        ("tenant-a", api.token("tenant-a"), "100.00"),
        ("tenant-b", api.token("tenant-b"), "999.00"),
    ];
    for (_, token, amount) in &tenants {
        let body = json!({"action": "create_invoice", "arguments": {"amount": amount}});
        let got = api
            .post(
                Some(token),
                Some("invoice-o-1"),
                "application/json",
                body.to_string(),
            )
            .await;
        assert_eq!(got.0, StatusCode::ACCEPTED, "{:?}", got.1);
    }
    let (rx, worker) = deliver_soon(&api).await;
    let mut call_keys = Vec::new();
    for (tenant, token, _) in &tenants {
        let client = mcp_client(&api, token, false).await;
        let arguments = json!({"customer": "same", "amount": "5.00"});
        let call = CallToolRequestParams::new("create_invoice")
            .with_arguments(arguments.as_object().cloned().unwrap_or_default());
        let result = client.call_tool(call).await.expect("call");
        let intent = result.structured_content.expect("the intent");
        let key = intent["idempotency_key"].as_str().expect("key").to_owned();
        let delivery_key = oncebox_core::delivery_key(tenant, &key);
        assert_eq!(intent["status"], "succeeded", "{intent}");
        assert_eq!(intent["delivery_key"], delivery_key, "{intent}");
        assert_eq!(
            intent["response"]["id"],
            format!("ref-{delivery_key}"),
            "{tenant}'s own object"
        );
        call_keys.push(key);
        let _ = client.cancel().await;
    }
    assert_eq!(
        call_keys[0], call_keys[1],
        "one call identity in both tenants"
    );
    for (tenant, token, _) in &tenants {
        let (code, intent, _) = api.get(token, "/v1/intents/invoice-o-1?wait=30").await;
        assert_eq!(code, StatusCode::OK);
        let delivery_key = format!("{tenant}:invoice-o-1");
        assert_eq!(intent["status"], "succeeded", "{intent}");
        assert_eq!(intent["delivery_key"], delivery_key, "{intent}");
        assert_eq!(
            intent["response"]["id"],
            format!("ref-{delivery_key}"),
            "{tenant}'s own invoice"
        );
    }
    let effects = rx.effects();
    assert_eq!(effects.len(), 4, "{effects:?}");
    assert!(effects.values().all(|n| *n == 1), "{effects:?}");
    let seen = rx.seen();
    assert_eq!(seen.len(), 4, "every request executed: {seen:?}");
    for (tenant, _, amount) in &tenants {
        let mine: Vec<&Value> = seen
            .iter()
            .filter(|s| s.key.starts_with(&format!("{tenant}:")))
            .map(|s| &s.body["amount"])
            .collect();
        assert_eq!(mine.len(), 2, "{tenant}: {mine:?}");
        assert!(
            mine.contains(&&json!(amount)),
            "{tenant}'s own invoice: {mine:?}"
        );
    }
    worker.stop().await;
    api.stop().await;
}

/// A browser's view of the console over plain HTTP: cookies kept by hand, redirects not
/// followed (each is checked).
struct ConsoleClient<'a> {
    api: &'a Api,
    http: reqwest::Client,
    cookies: std::collections::BTreeMap<String, String>,
}

/// `s` form-encoded.
fn form_value(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The value of the hidden `csrf` field of a console page.
fn csrf_in(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {page}"));
    let rest = &page[at + "name=\"csrf\" value=\"".len()..];
    rest[..rest.find('"').expect("closing quote")].to_owned()
}

impl<'a> ConsoleClient<'a> {
    fn new(api: &'a Api) -> ConsoleClient<'a> {
        ConsoleClient::from_address(api, [127, 0, 0, 1])
    }

    /// A browser whose connections come from loopback address `from` (any 127.x.y.z).
    fn from_address(api: &'a Api, from: [u8; 4]) -> ConsoleClient<'a> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .local_address(std::net::IpAddr::from(from))
            .build()
            .expect("client");
        ConsoleClient {
            api,
            http,
            cookies: Default::default(),
        }
    }

    fn keep_cookies(&mut self, r: &reqwest::Response) -> Vec<String> {
        let set: Vec<String> = r
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect();
        for c in &set {
            let (pair, _) = c.split_once(';').unwrap_or((c, ""));
            let (name, value) = pair.split_once('=').expect("name=value");
            if value.is_empty() {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        set
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// GET `path`: status, the `location` header, the body.
    async fn get(&mut self, path: &str) -> (StatusCode, Option<String>, String) {
        let r = self
            .http
            .get(format!("{}{path}", self.api.base))
            .header("cookie", self.cookie_header())
            .send()
            .await
            .expect("GET");
        self.keep_cookies(&r);
        let location = header(&r, "location");
        (r.status(), location, r.text().await.expect("body"))
    }

    /// POST a form to `path`: status, `location`, the cookies set, the body.
    async fn post(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
    ) -> (StatusCode, Option<String>, Vec<String>, String) {
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", form_value(k), form_value(v)))
            .collect::<Vec<_>>()
            .join("&");
        let r = self
            .http
            .post(format!("{}{path}", self.api.base))
            .header("cookie", self.cookie_header())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("POST");
        let set = self.keep_cookies(&r);
        let location = header(&r, "location");
        (r.status(), location, set, r.text().await.expect("body"))
    }

    /// Logs in with `token`: the login page's answer.
    async fn login(&mut self, token: &str) -> (StatusCode, Option<String>, Vec<String>, String) {
        let (status, _, page) = self.get("/console/login").await;
        assert_eq!(status, StatusCode::OK, "{page}");
        let csrf = csrf_in(&page);
        self.post("/console/login", &[("csrf", &csrf), ("token", token)])
            .await
    }
}

/// What an agent or a receiver wrote is shown by every console page as text, never as markup:
/// intents whose key, business reference, arguments, receiver response, error and operator
/// reason carry HTML and script are shown on the overview, "Needs a person", search (a list, a
/// miss) and their own pages with every `<` escaped, and no page holds a tag they brought.
#[tokio::test]
async fn the_console_shows_what_agents_and_receivers_wrote_as_text() {
    let api = Api::start("console_xss").await;
    let agent = api.token("tenant-a");
    let ops = api.token_with_role("tenant-a", "ops");
    // Tags and attribute breakers in every field an agent or a receiver fills.
    let delivered = "x<script>alert(1)</script>";
    let cancelled = "x\"><img/src=x/onerror=alert(2)>";
    let expired = "<svg/onload=alert(3)>";
    let reference = "<b>ref</b>&amp;";
    let note = "</pre></td><script>alert(4)</script>";
    let reason = "<script>alert(5)</script>";
    let brought = [
        "<script>alert(1)",
        "<img/src=x",
        "<svg/onload",
        "<b>ref</b>",
        "</pre></td><script>",
        "<script>alert(5)",
    ];
    let body = |deadline: Option<String>| {
        json!({"action": "create_invoice", "business_ref": reference, "deadline": deadline,
               "arguments": {"order_id": "o-1", "amount": "10.00", "note": note}})
        .to_string()
    };
    for key in [delivered, cancelled] {
        let made = api
            .post(Some(&agent), Some(key), "application/json", body(None))
            .await;
        assert_eq!(made.0, StatusCode::ACCEPTED, "{made:?}");
    }
    let expires_at = chrono::Utc::now() + chrono::Duration::seconds(1);
    let made = api
        .post(
            Some(&agent),
            Some(expired),
            "application/json",
            body(Some(expires_at.to_rfc3339())),
        )
        .await;
    assert_eq!(made.0, StatusCode::ACCEPTED, "{made:?}");
    run_ok(
        Command::new(BIN)
            .args([
                "ops", "cancel", cancelled, "--tenant", "tenant-a", "--reason", reason,
            ])
            .env("DATABASE_URL", &api.db_url),
    );
    // Past its deadline, the worker expires one and delivers the other (the receiver answers
    // with the key in its body: {"id": "ref-x<script>…"}).
    while chrono::Utc::now() <= expires_at {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_rx, worker) = deliver_soon(&api).await;
    for (key, status) in [(delivered, "succeeded"), (expired, "expired")] {
        let (code, intent, _) = api
            .get(&agent, &format!("/v1/intents/{}?wait=30", form_value(key)))
            .await;
        assert_eq!(
            (code, intent["status"].as_str()),
            (StatusCode::OK, Some(status))
        );
    }

    let mut browser = ConsoleClient::new(&api);
    let (status, _, _, _) = browser.login(&ops).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let pages = [
        "/console".to_owned(),
        "/console/attention".to_owned(),
        format!("/console/search?q={}", form_value(reference)),
        format!("/console/search?q={}", form_value("<i>nothing</i>")),
        format!("/console/intents/{}", form_value(delivered)),
        format!("/console/intents/{}", form_value(cancelled)),
        format!("/console/intents/{}", form_value(expired)),
    ];
    let mut shown = String::new();
    for path in &pages {
        let (status, _, page) = browser.get(path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {page}");
        for tag in brought.iter().chain(&["<i>nothing"]) {
            assert!(
                !page.contains(tag),
                "{path} holds {tag:?} as markup:\n{page}"
            );
        }
        assert!(!page.contains("<script"), "{path}: a script on the page");
        shown.push_str(&page);
    }
    // And each was shown, as text.
    for text in [
        "x&lt;script&gt;alert(1)&lt;/script&gt;",
        "&quot;&gt;&lt;img/src=x/onerror=alert(2)&gt;",
        "&lt;svg/onload=alert(3)&gt;",
        "&lt;b&gt;ref&lt;/b&gt;&amp;amp;",
        "&lt;/pre&gt;&lt;/td&gt;&lt;script&gt;alert(4)&lt;/script&gt;",
        "&lt;script&gt;alert(5)&lt;/script&gt;",
        "ref-tenant-a:x&lt;script&gt;alert(1)&lt;/script&gt;",
        "&lt;i&gt;nothing&lt;/i&gt;",
    ] {
        assert!(shown.contains(text), "no page shows {text:?}");
    }
    worker.stop().await;
    api.stop().await;
}

#[tokio::test]
async fn the_console_needs_an_ops_session_and_its_csrf_token_and_stays_in_its_tenant() {
    let api = Api::start("console").await;
    let agent = api.token("tenant-a");
    let ops = api.token_with_role("tenant-a", "ops");
    let other_ops = api.token_with_role("tenant-b", "ops");
    for key in ["c1", "c2"] {
        let made = api
            .post(Some(&agent), Some(key), "application/json", invoice(1))
            .await;
        assert_eq!(made.0, StatusCode::ACCEPTED, "{made:?}");
    }

    // No session: every page sends the browser to the login page.
    let mut browser = ConsoleClient::new(&api);
    for path in ["/console", "/console/attention", "/console/intents/c1"] {
        let (status, location, _) = browser.get(path).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{path}");
        assert_eq!(location.as_deref(), Some("/console/login"), "{path}");
    }
    // The login page: CSP with no script source, its CSRF cookie HttpOnly and SameSite=Strict.
    let r = reqwest::get(format!("{}/console/login", api.base))
        .await
        .expect("login page");
    let csp = header(&r, "content-security-policy").expect("a CSP");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(
        !csp.contains("script-src") && !csp.contains("unsafe"),
        "{csp}"
    );
    assert_eq!(header(&r, "x-frame-options").as_deref(), Some("DENY"));
    let login_cookie = header(&r, "set-cookie").expect("a login cookie");
    assert!(
        login_cookie.contains("HttpOnly") && login_cookie.contains("SameSite=Strict"),
        "{login_cookie}"
    );
    assert!(!r.text().await.expect("body").contains("<script"));

    // A login without the CSRF token, or with an agent or unknown token, opens no session.
    let (status, _, set, _) = browser
        .post("/console/login", &[("token", ops.as_str())])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        set.iter().all(|c| !c.starts_with("oncebox_session=")),
        "{set:?}"
    );
    let (status, _, set, page) = browser.login(&agent).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{page}");
    assert!(page.contains("agent token"), "{page}");
    assert!(
        set.iter().all(|c| !c.starts_with("oncebox_session=")),
        "{set:?}"
    );
    let (status, _, _, page) = browser.login("obx_not_a_token").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{page}");

    // An ops token opens a session: HttpOnly, SameSite=Strict, for /console, not Secure on
    // plain HTTP.
    let (status, location, set, _) = browser.login(&ops).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location.as_deref(), Some("/console"));
    let session = set
        .iter()
        .find(|c| c.starts_with("oncebox_session="))
        .expect("a session cookie");
    for part in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(session.contains(part), "{session}");
    }
    assert!(!session.contains("Secure"), "{session}");
    let (status, _, page) = browser.get("/console").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(page.contains("Intents by status and destination"), "{page}");
    assert!(page.contains("<svg"), "the chart: {page}");

    // A change without the session's CSRF token changes nothing.
    let (status, _, page) = browser.get("/console/intents/c1").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let csrf = csrf_in(&page);
    assert!(
        page.contains("action=\"/console/intents/c1/cancel\""),
        "{page}"
    );
    let (status, _, _, _) = browser
        .post("/console/intents/c1/cancel", &[("reason", "no token")])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _, _) = browser
        .post(
            "/console/intents/c1/cancel",
            &[("csrf", "0000"), ("reason", "a wrong token")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A decision without a reason is refused naming the field.
    let (status, _, _, page) = browser
        .post(
            "/console/intents/c1/cancel",
            &[("csrf", &csrf), ("reason", " ")],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("reason:"), "{page}");
    let (_, intent, _) = api.get(&agent, "/v1/intents/c1").await;
    assert_eq!(intent["status"], "pending", "nothing changed yet");

    // With both, it is made, and audited as the console's.
    let (status, location, _, _) = browser
        .post(
            "/console/intents/c1/cancel",
            &[("csrf", &csrf), ("reason", "the customer withdrew")],
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location.as_deref(), Some("/console/intents/c1?done=cancel"));
    let (_, intent, _) = api.get(&agent, "/v1/intents/c1").await;
    assert_eq!(intent["status"], "cancelled");
    let (_, _, page) = browser.get("/console/intents/c1?done=cancel").await;
    assert!(
        page.contains("the customer withdrew"),
        "the audit row: {page}"
    );
    let audit = run_ok(
        Command::new(BIN)
            .args(["ops", "audit", "--key", "c1", "--json"])
            .env("DATABASE_URL", &api.db_url),
    );
    let audit: Value = serde_json::from_slice(&audit.stdout).expect("json");
    let row = &audit[0];
    assert_eq!(row["via"], "console", "{audit}");
    assert_eq!(row["role"], "ops");
    assert_eq!(row["action"], "cancel");
    assert_eq!(row["reason"], "the customer withdrew");
    assert_eq!(row["status_before"], "pending");
    assert_eq!(row["status_after"], "cancelled");
    // The principal of the token's holder (token_with_role issues each to ops-N@TENANT).
    assert!(
        row["actor"]
            .as_str()
            .is_some_and(|a| a.starts_with("user:ops-") && a.ends_with("@tenant-a")),
        "{row}"
    );

    // Search finds by key; another tenant's operator finds nothing of tenant-a's.
    let (status, location, _) = browser.get("/console/search?q=c2").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location.as_deref(), Some("/console/intents/c2"));
    let mut other = ConsoleClient::new(&api);
    assert_eq!(other.login(&other_ops).await.0, StatusCode::SEE_OTHER);
    let (status, _, page) = other.get("/console/intents/c2").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{page}");
    let (status, _, page) = other.get("/console/search?q=c2").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("No intent of tenant tenant-b"), "{page}");
    let (_, _, page) = other.get("/console").await;
    assert!(
        page.contains("No intents yet."),
        "tenant-b sees none of tenant-a's: {page}"
    );

    // Logout ends the session: the old cookie opens nothing.
    let old = browser.cookies.clone();
    let (status, location, _, _) = browser.post("/console/logout", &[("csrf", &csrf)]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location.as_deref(), Some("/console/login"));
    browser.cookies = old;
    let (status, location, _) = browser.get("/console").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.is_some_and(|l| l.starts_with("/console/login")));

    // Revoking the token ends its sessions at once.
    let mut db = PgConnection::connect(&api.db_url).await.expect("db");
    sqlx::query("UPDATE oncebox.api_tokens SET revoked_at = now() WHERE tenant_id = 'tenant-b'")
        .execute(&mut db)
        .await
        .expect("revoke");
    let (status, _, _) = other.get("/console").await;
    assert_eq!(
        status,
        StatusCode::SEE_OTHER,
        "a revoked token's session is over"
    );
    api.stop().await;
}

#[path = "api/edges.rs"]
mod edges;

#[path = "api/identity.rs"]
mod identity;
#[path = "api/people.rs"]
mod people;
