//! The people at the walls. Four eyes across every way in: an intent submitted by one principal
//! — through the API, the `/mcp` gateway, the Rust library's intake or `oncebox submit` —
//! cannot be approved by that principal through the ops API, the console or the CLI, whichever
//! of their tokens they use; a second approval by the same principal is refused; two distinct
//! principals release it, once. Approvers, and no one else, see the redacted values as they will
//! execute, each view audited. The approvals page counts and pages what waits. Sign-in limits
//! hold one source back, not the operators.

use oncebox_core::Principal;
use oncebox_core::config::Config;
use oncebox_core::redact::RedactionKeys;
use oncebox_store::Intake;

use super::edges::{mcp_post, open_session};
use super::*;

/// A new token of tenant-a with `role`, issued to `holder`.
fn issued(api: &Api, role: &str, holder: &str) -> String {
    let out = run_ok(
        Command::new(BIN)
            .args([
                "ops", "token", "create", "--tenant", "tenant-a", "--role", role,
            ])
            .args(["--holder", holder])
            .env("DATABASE_URL", &api.db_url),
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `oncebox ops approve KEY` through the API with `token`: exit code and stderr.
fn cli_approve(api: &Api, token: &str, key: &str) -> (i32, String) {
    let out = Command::new(BIN)
        .args([
            "ops", "approve", key, "--api", &api.base, "--reason", "checked",
        ])
        .env("ONCEBOX_TOKEN", token)
        .env_remove("DATABASE_URL")
        .output()
        .expect("oncebox ops approve");
    let code = out.status.code().expect("exit code");
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Approves `key` in the console, logged in with `token`: the answer's status and page.
async fn console_approve(api: &Api, token: &str, key: &str) -> (StatusCode, String) {
    let mut browser = ConsoleClient::new(api);
    let (status, _, _, page) = browser.login(token).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "logged in: {page}");
    let (_, _, page) = browser.get(&format!("/console/intents/{key}")).await;
    let csrf = csrf_in(&page);
    let path = format!("/console/intents/{key}/approve");
    let (status, _, _, page) = browser
        .post(
            &path,
            &[("csrf", &csrf), ("reason", "checked in the console")],
        )
        .await;
    (status, page)
}

/// Submits the four payouts, one per way in, as `user:sam@example.com`.
async fn submit_as_sam_everywhere(api: &Api) -> Vec<&'static str> {
    let big = || json!({"action": "payout", "arguments": {"amount": "5000.00"}});
    // The API, with an agent token issued to sam.
    let agent = issued(api, "agent", "sam@example.com");
    let made = api
        .post(
            Some(&agent),
            Some("via-api"),
            "application/json",
            big().to_string(),
        )
        .await;
    assert_eq!(made.1["status"], "awaiting_approval", "{:?}", made.1);
    assert_eq!(made.1["submitted_by"], "user:sam@example.com");
    // The MCP gateway, with the same token.
    let session = open_session(api, &agent).await.expect("session");
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "payout", "arguments": {"amount": "5000.00"},
        "_meta": {"oncebox.dev/idempotency_key": "via-mcp"}}});
    let (status, _, body) = mcp_post(api, &agent, Some(&session), call).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The Rust library, in the application's own transaction, naming its principal.
    let keys = RedactionKeys::parse(REDACTION_KEYS).expect("keys");
    let sam = Principal::named("principal", "sam@example.com").expect("name");
    let intake = Intake::new(&Config::from_toml(CONFIG).expect("config"), Some(keys))
        .expect("intake")
        .with_principal(&sam);
    let pool = sqlx::PgPool::connect(&api.db_url).await.expect("pool");
    let mut tx = pool.begin().await.expect("begin");
    let arguments = json!({"amount": "5000.00"});
    let intent = oncebox_core::NewIntent::new(
        oncebox_core::IntentNames {
            tenant_id: "tenant-a",
            idempotency_key: "via-library",
            action: "payout",
        },
        arguments,
    );
    intake.submit(&mut tx, intent).await.expect("submit");
    tx.commit().await.expect("commit");
    // The CLI, with --principal.
    let config = api.dir().join(format!("{}-principals.toml", api.db.name()));
    std::fs::write(&config, CONFIG).expect("config");
    run_ok(
        Command::new(BIN)
            .args(["submit", "--tenant", "tenant-a", "--action", "payout"])
            .args(["--arguments", r#"{"amount": "5000.00"}"#, "--principal"])
            .args(["sam@example.com", "--config"])
            .arg(&config)
            .arg("via-cli")
            .env("DATABASE_URL", &api.db_url)
            .env("ONCEBOX_REDACTION_KEYS", REDACTION_KEYS),
    );
    let keys = vec!["via-api", "via-mcp", "via-library", "via-cli"];
    for key in &keys {
        let (submitter,): (Option<String>,) =
            sqlx::query_as("SELECT submitted_by FROM oncebox.intents WHERE idempotency_key = $1")
                .bind(key)
                .fetch_one(&pool)
                .await
                .expect("intent");
        assert_eq!(submitter.as_deref(), Some("user:sam@example.com"), "{key}");
    }
    pool.close().await;
    keys
}

#[tokio::test]
async fn the_submitter_never_approves_and_one_principal_counts_once_on_every_way() {
    let api = Api::start("principals").await;
    let keys = submit_as_sam_everywhere(&api).await;
    // Sam holds an ops token too (another token, the same holder: the same principal).
    let sam_ops = issued(&api, "ops", "sam@example.com");
    let ana = issued(&api, "ops", "ana@example.com");
    let ana_again = issued(&api, "ops", "ana@example.com");
    let bo = issued(&api, "ops", "bo@example.com");
    let counted = async |key: &str| -> i64 {
        let pool = sqlx::PgPool::connect(&api.db_url).await.expect("pool");
        let n = sqlx::query_scalar(
            "SELECT count(*) FROM oncebox.approvals a JOIN oncebox.intents i \
             ON i.id = a.intent_id WHERE i.idempotency_key = $1",
        )
        .bind(key)
        .fetch_one(&pool)
        .await
        .expect("approvals");
        pool.close().await;
        n
    };
    for key in keys {
        // The submitter, on each way a person decides: refused, nothing recorded.
        let own = decide(&api, &sam_ops, key, "approve", json!({})).await;
        problem(&own, 409, "key");
        assert!(
            own.1["detail"]
                .as_str()
                .is_some_and(|d| d.contains("user:sam@example.com submitted")),
            "{key}: {:?}",
            own.1
        );
        let (code, err) = cli_approve(&api, &sam_ops, key);
        assert_eq!(code, 3, "{key}: {err}");
        assert!(err.contains("someone else must approve it"), "{key}: {err}");
        let (status, page) = console_approve(&api, &sam_ops, key).await;
        assert_eq!(status, StatusCode::CONFLICT, "{key}");
        assert!(page.contains("someone else must approve it"), "{key}");
        assert_eq!(counted(key).await, 0, "{key}");

        // Ana approves through the API; her other token, in the console, counts for nothing.
        let first = decide(&api, &ana, key, "approve", json!({})).await;
        assert_eq!(
            first.1["status"], "awaiting_approval",
            "{key}: {:?}",
            first.1
        );
        let (status, page) = console_approve(&api, &ana_again, key).await;
        assert_eq!(status, StatusCode::CONFLICT, "{key}");
        assert!(page.contains("one person counts once"), "{key}");
        let (code, err) = cli_approve(&api, &ana, key);
        assert_eq!(code, 3, "{key}: {err}");
        assert_eq!(counted(key).await, 1, "{key}");

        // Bo, a second principal, through the CLI: released, queued once.
        let (code, err) = cli_approve(&api, &bo, key);
        assert_eq!(code, 0, "{key}: {err}");
        let shown = api.get(&ana, &format!("/v1/intents/{key}")).await;
        assert_eq!(shown.1["status"], "pending", "{key}");
        assert_eq!(counted(key).await, 2, "{key}");
    }
    let pool = sqlx::PgPool::connect(&api.db_url).await.expect("pool");
    let queued: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM oncebox.outbox WHERE phase = 'deliver' \
         AND intent_id IN (SELECT id FROM oncebox.intents WHERE idempotency_key LIKE 'via-%')",
    )
    .fetch_one(&pool)
    .await
    .expect("queued");
    assert_eq!(queued, 4, "one delivery queued per intent");
    let approvers: Vec<(String, String)> = sqlx::query_as(
        "SELECT DISTINCT actor, via FROM oncebox.audit WHERE action = 'approve' ORDER BY 1, 2",
    )
    .fetch_all(&pool)
    .await
    .expect("audit");
    assert_eq!(
        approvers,
        [
            ("user:ana@example.com".to_owned(), "api".to_owned()),
            ("user:bo@example.com".to_owned(), "api".to_owned())
        ]
    );
    pool.close().await;
    api.stop().await;
}

/// An ops token names its holder, who must be a name a principal can have; the CLI refuses
/// anything else naming the field, and approve takes no name from its command line at all.
#[tokio::test]
async fn holders_are_required_for_ops_and_approve_takes_no_typed_name() {
    let api = Api::start("holders").await;
    let create = |args: &[&str]| {
        Command::new(BIN)
            .args(["ops", "token", "create", "--tenant", "tenant-a"])
            .args(args)
            .env("DATABASE_URL", &api.db_url)
            .output()
            .expect("token create")
    };
    let out = create(&["--role", "ops"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holder"));
    let huge = "x".repeat(256);
    for bad in ["", " ana", "ana\u{7}", huge.as_str()] {
        let out = create(&["--role", "ops", "--holder", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("holder:"),
            "{bad:?}"
        );
    }
    // An agent token may name none: it is a principal of its own.
    assert!(create(&["--role", "agent"]).status.success());
    let typed = Command::new(BIN)
        .args(["ops", "approve", "k", "--api", &api.base, "--actor", "ana"])
        .env("ONCEBOX_TOKEN", "obx_x")
        .output()
        .expect("approve");
    assert_eq!(
        typed.status.code(),
        Some(2),
        "--actor is not an option of approve"
    );
    let tokenless = Command::new(BIN)
        .args(["ops", "approve", "k", "--api", &api.base])
        .env_remove("ONCEBOX_TOKEN")
        .output()
        .expect("approve");
    assert_eq!(tokenless.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&tokenless.stderr).contains("ONCEBOX_TOKEN"));
    api.stop().await;
}

/// The approvals page counts every intent that waits, pages them oldest first, and marks the
/// ones whose window closes within the hour; the overview shows the count.
#[tokio::test]
async fn the_approvals_page_counts_pages_and_marks_what_expires_soon() {
    let api = Api::start("approvals_page").await;
    let agent = api.token("tenant-a");
    let ops = api.token_with_role("tenant-a", "ops");
    for n in 0..57 {
        let body = json!({"action": "payout", "arguments": {"amount": "5000.00"}});
        let made = api
            .post(
                Some(&agent),
                Some(&format!("wait-{n:02}")),
                "application/json",
                body.to_string(),
            )
            .await;
        assert_eq!(made.1["status"], "awaiting_approval", "{:?}", made.1);
    }
    // The newest one's window closes in ten minutes.
    let pool = sqlx::PgPool::connect(&api.db_url).await.expect("pool");
    sqlx::query(
        "UPDATE oncebox.intents SET approval_expires_at = now() + interval '10 minutes' \
         WHERE idempotency_key = 'wait-56'",
    )
    .execute(&pool)
    .await
    .expect("soon");
    pool.close().await;
    let mut browser = ConsoleClient::new(&api);
    let (status, _, _, _) = browser.login(&ops).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (_, _, overview) = browser.get("/console").await;
    assert!(overview.contains("await approval"), "{overview}");
    assert!(overview.contains(">57<"), "the overview counts them");
    let (status, _, first) = browser.get("/console/approvals").await;
    assert_eq!(status, StatusCode::OK);
    assert!(first.contains("<b>57</b> await approval"), "{first}");
    assert!(first.contains("the first window closes in "), "{first}");
    let rows = |page: &str| page.matches("<tr").count() - 1;
    assert_eq!(rows(&first), 50, "a page of 50");
    assert!(first.contains("wait-00") && first.contains("wait-49") && !first.contains("wait-50"));
    let at = first
        .find("/console/approvals?after=")
        .expect("a next page");
    let rest = &first[at..];
    let next = rest[..rest.find('"').expect("quote")].replace("&amp;", "&");
    let (status, _, second) = browser.get(&next).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rows(&second), 7, "the rest");
    assert!(
        second.contains("wait-50") && second.contains("wait-56") && !second.contains("wait-49")
    );
    assert_eq!(
        second.matches("class=\"soon\"").count(),
        1,
        "the one closing soon is marked"
    );
    assert!(!first.contains("class=\"soon\""));
    // A cursor that is not one shows the first page.
    let (status, _, again) = browser.get("/console/approvals?after=..%2F..%00").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(rows(&again), 50);
    api.stop().await;
}

/// A flood of login pages from one address, or of failed logins, slows that address alone:
/// an operator elsewhere still gets a login page and logs in.
#[tokio::test]
async fn a_login_flood_from_one_source_locks_out_only_that_source() {
    let api = Api::start("login_flood").await;
    let ops = api.token_with_role("tenant-a", "ops");
    // Anonymous: login pages from 127.0.0.2 until refused (a burst of 50, then 5/s).
    let mut flood = ConsoleClient::from_address(&api, [127, 0, 0, 2]);
    let mut served = 0;
    loop {
        let (status, _, _) = flood.get("/console/login").await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            break;
        }
        assert_eq!(status, StatusCode::OK);
        served += 1;
        assert!(served < 500, "the flood was never refused");
    }
    let mut operator = ConsoleClient::from_address(&api, [127, 0, 0, 3]);
    let (status, _, _) = operator.get("/console/login").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "another address still gets a login page"
    );
    // Failed logins from 127.0.0.4: ten, then that address is refused, even with a good token.
    let mut guesser = ConsoleClient::from_address(&api, [127, 0, 0, 4]);
    for n in 0..10 {
        let (status, _, _, page) = guesser.login(&format!("obx_guess_{n}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "guess {n}: {page}");
    }
    let (status, _, _, page) = guesser.login(&ops).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{page}");
    assert!(page.contains("Too many logins from this address failed"));
    // The operator's address logs in.
    let (status, location, _, page) = operator.login(&ops).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{page}");
    assert_eq!(location.as_deref(), Some("/console"));
    api.stop().await;
}

/// An approver sees the fields the policy tests and the redacted ones as the receiver will get
/// them, each view a row of the audit log; the intent page, the API and the audit log itself
/// still show the IBAN only as its keyed hash.
#[tokio::test]
async fn approvers_see_what_will_execute_and_each_view_is_audited() {
    let api = Api::start("originals").await;
    let agent = api.token("tenant-a");
    let ana = issued(&api, "ops", "ana@example.com");
    let iban = "DE89370400440532013000";
    let body = json!({"action": "payout", "arguments": {"amount": "5000.00", "iban": iban}});
    let made = api
        .post(
            Some(&agent),
            Some("pay-1"),
            "application/json",
            body.to_string(),
        )
        .await;
    assert_eq!(made.1["status"], "awaiting_approval", "{:?}", made.1);
    let small = json!({"action": "payout", "arguments": {"amount": "5.00", "iban": iban}});
    api.post(
        Some(&agent),
        Some("pay-2"),
        "application/json",
        small.to_string(),
    )
    .await;
    let shown = api.get(&ana, "/v1/ops/intents/pay-1").await;
    assert!(
        !shown.1.to_string().contains(iban),
        "the API shows it redacted"
    );

    let mut browser = ConsoleClient::new(&api);
    let (status, _, _, _) = browser.login(&ana).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (_, _, page) = browser.get("/console/intents/pay-1").await;
    assert!(!page.contains(iban), "the intent page shows it redacted");
    let csrf = csrf_in(&page);
    // Without the session's CSRF token: refused, nothing shown, nothing recorded.
    let (status, _, _, page) = browser
        .post("/console/intents/pay-1/originals", &[("csrf", "nope")])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!page.contains(iban));
    let views = async || -> Vec<(String, String)> {
        let pool = sqlx::PgPool::connect(&api.db_url).await.expect("pool");
        let rows = sqlx::query_as(
            "SELECT actor, coalesce(reason, '') FROM oncebox.audit WHERE action = 'view' ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .expect("audit");
        pool.close().await;
        rows
    };
    assert!(views().await.is_empty());
    let (status, _, _, page) = browser
        .post("/console/intents/pay-1/originals", &[("csrf", &csrf)])
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains(iban),
        "the approver sees the IBAN the receiver will get"
    );
    assert!(page.contains("&quot;5000.00&quot;") || page.contains("\"5000.00\""));
    let seen = views().await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].0, "user:ana@example.com");
    assert!(
        !seen[0].1.contains(iban),
        "the audit row names the view, not the values"
    );
    // Only while it awaits approval: an intent that does not is refused, and not recorded.
    let (status, _, _, page) = browser
        .post("/console/intents/pay-2/originals", &[("csrf", &csrf)])
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(!page.contains(iban));
    assert_eq!(views().await.len(), 1);
    // Another tenant's ops session finds no such intent.
    let other = api.token_with_role("tenant-b", "ops");
    let mut outsider = ConsoleClient::new(&api);
    outsider.login(&other).await;
    let (_, _, page) = outsider.get("/console").await;
    let theirs = csrf_in(&page);
    let (status, _, _, page) = outsider
        .post("/console/intents/pay-1/originals", &[("csrf", &theirs)])
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(!page.contains(iban));
    assert_eq!(views().await.len(), 1);
    api.stop().await;
}
