//! Approvals end to end: an intent its action's policy matches waits for people — no request
//! reaches the receiver until enough distinct people approved it — then is delivered once; a
//! rejected one is never sent; one nobody approved in time expires with a dead letter; a worker
//! killed right after the last approval still delivers it once.

use std::time::Duration;

use serde_json::{Value, json};

use crate::broker::*;
use crate::env::*;
use crate::support::free_addr;

/// Refunds of 1,000 or more need two people; amounts travel as decimal strings.
fn policy(rx_url: &str, honours: &str, expires_after: &str) -> String {
    config(
        rx_url,
        honours,
        &format!(
            r#"
[actions.create_invoice.approval]
when = {{ type = "object", required = ["amount"], properties = {{ amount = {{ decimalMinimum = "1000" }} }} }}
approvals = 2
expires_after = "{expires_after}"
"#
        ),
    )
}

/// Requests the receiver saw under `key` (every one: it does not deduplicate here).
fn requests(rx: &oncebox_receiver::Receiver, key: &str) -> usize {
    rx.seen().iter().filter(|s| s.key.ends_with(key)).count()
}

/// `oncebox ops approve KEY` through the ops API at `serve`, with a new ops token issued to
/// `person@example.com` (every token of one holder is one principal): its exit code, the
/// intent and stderr.
fn approve(env: &Env, serve: &Serve, key: &str, person: &str) -> (i32, Value, String) {
    let token = env.ops_token(&format!("{person}@example.com"));
    let reason = format!("checked by {person}");
    decide(serve, &token, &["approve", key, "--reason", &reason])
}

/// `oncebox ops reject KEY ARGS…` through the ops API at `serve`, as `person`.
fn reject(env: &Env, serve: &Serve, person: &str, args: &[&str]) -> (i32, Value, String) {
    let token = env.ops_token(&format!("{person}@example.com"));
    decide(serve, &token, &[&["reject"], args].concat())
}

#[tokio::test]
async fn nothing_is_sent_until_two_people_approve_then_exactly_one_request() {
    let rx = receiver(false).await;
    let env = Env::new("approve", &policy(&rx.url(), "key", "24h")).await;
    let serve = env.serve().await;
    env.intent("big", json!({"amount": "5000.00"})).await;
    env.intent("small", json!({"amount": "50"})).await;
    assert_eq!(env.status_of("big").await, "awaiting_approval");
    assert_eq!(env.status_of("small").await, "pending");
    // Queued for the end of its window, a day away: out of every claim's reach until then.
    let hours: f64 = env
        .scalar(
            "SELECT extract(epoch FROM available_at - now())::float8 / 3600 FROM oncebox.outbox \
             WHERE phase = 'deliver' AND intent_id = \
             (SELECT id FROM oncebox.intents WHERE idempotency_key = 'big')",
        )
        .await;
    assert!(hours > 23.9, "queued {hours} h ahead");
    let metrics = free_addr();
    let worker = env.worker_with("w", &[], "5s", &["--metrics-addr", &metrics]);
    env.wait_status("small", "succeeded").await;
    // The gauges count it, and how long it has waited.
    let series = r#"oncebox_intents_waiting{status="awaiting_approval"}"#;
    env.wait_until(Duration::from_secs(30), series, || async {
        metric(&scrape(&metrics).await, series) == Some(1.0)
    })
    .await;
    let age = r#"oncebox_oldest_waiting_age_seconds{status="awaiting_approval"}"#;
    assert!(metric(&scrape(&metrics).await, age).is_some_and(|s| s >= 0.0));

    // The first approval: still waiting; the same person again counts for nothing.
    let (code, intent, err) = approve(&env, &serve, "big", "ana");
    assert_eq!(code, 0, "{err}");
    assert_eq!(intent["status"], "awaiting_approval");
    let (code, _, err) = approve(&env, &serve, "big", "ana");
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("already approved") && err.contains("one person counts once"),
        "{err}"
    );
    // The worker has claimed past it (a later intent was delivered); nothing was sent for it.
    env.intent("small-2", json!({"amount": "60"})).await;
    env.wait_status("small-2", "succeeded").await;
    assert_eq!(requests(&rx, "big"), 0, "sent before its second approval");

    let (code, intent, err) = approve(&env, &serve, "big", "bo");
    assert_eq!(code, 0, "{err}");
    assert_eq!(intent["status"], "pending");
    env.wait_status("big", "succeeded").await;
    env.wait_until(
        Duration::from_secs(30),
        "the gauge back to none",
        || async { metric(&scrape(&metrics).await, series).is_none_or(|n| n == 0.0) },
    )
    .await;
    assert!(worker.stop().await.success());
    assert_eq!(requests(&rx, "big"), 1, "exactly one request once approved");
    assert_eq!(rx.effects().get(&dk("big")), Some(&1));

    // The audit log names both people, with their reasons.
    let (code, audit, err) = ops(&env, &["audit", "--key", "big"]);
    assert_eq!(code, 0, "{err}");
    let rows = audit.as_array().expect("rows");
    let decided: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["actor"].as_str().unwrap_or(""),
                r["action"].as_str().unwrap_or(""),
                r["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        decided,
        [
            ("user:bo@example.com", "approve", "checked by bo"),
            ("user:ana@example.com", "approve", "checked by ana")
        ]
    );
    // Once released, it cannot be approved again.
    let (code, _, err) = approve(&env, &serve, "big", "cy");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("is succeeded"), "{err}");
    drop(serve);
    env.drop_db().await;
}

#[tokio::test]
async fn a_rejected_intent_is_final_and_never_sent() {
    let rx = receiver(false).await;
    let env = Env::new("reject", &policy(&rx.url(), "key", "24h")).await;
    let serve = env.serve().await;
    env.intent("no", json!({"amount": "1000"})).await;
    assert_eq!(env.status_of("no").await, "awaiting_approval");
    let (code, _, err) = reject(&env, &serve, "ana", &["no"]);
    assert_ne!(code, 0, "a rejection needs a reason");
    assert!(err.contains("--reason"), "{err}");
    let (code, intent, err) = reject(
        &env,
        &serve,
        "ana",
        &["no", "--reason", "not this customer"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(intent["status"], "rejected");
    assert!(intent["completed_at"].is_string());
    let (code, _, err) = approve(&env, &serve, "no", "bo");
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("is rejected"), "{err}");
    let worker = env.worker("w", &[], "5s");
    env.intent("later", json!({"amount": "1"})).await;
    env.wait_status("later", "succeeded").await;
    assert!(worker.stop().await.success());
    assert_eq!(requests(&rx, "no"), 0, "a rejected intent is never sent");
    assert_eq!(
        env.count("SELECT count(*) FROM oncebox.outbox").await,
        0,
        "no work left for it"
    );
    drop(serve);
    env.drop_db().await;
}

#[tokio::test]
async fn an_approval_nobody_makes_expires_with_a_dead_letter() {
    let _one_at_a_time = AMQP.lock().await;
    let rx = receiver(false).await;
    let env = Env::new("unapproved", &policy(&rx.url(), "key", "1s")).await;
    let serve = env.serve().await;
    env.intent("late", json!({"amount": "2500"})).await;
    let (worker, exchange) = dead_letter_worker(&env, "w", "5s");
    env.wait_status("late", "expired").await;
    wait_dead_letters_published(&env, Duration::from_secs(20)).await;
    assert!(worker.stop().await.success());
    assert_eq!(reports(&env, "late").await, ["expired"]);
    let letters = drain_queue(&format!("{exchange}.expired")).await;
    assert_eq!(letters.len(), 1, "one dead letter: {letters:?}");
    assert_eq!(letters[0].1["status"], "expired");
    let (code, _, err) = approve(&env, &serve, "late", "ana");
    assert_eq!(code, 3, "{err}");
    assert_eq!(requests(&rx, "late"), 0, "never sent");
    delete_exchange(&exchange).await;
    drop(serve);
    env.drop_db().await;
}

#[tokio::test]
async fn a_worker_killed_right_after_the_last_approval_still_delivers_once() {
    let rx = receiver(true).await;
    let env = Env::new("approve-kill", &policy(&rx.url(), "key", "24h")).await;
    let serve = env.serve().await;
    for i in 0..20 {
        env.intent(format!("r{i}"), json!({"amount": "1500"})).await;
    }
    let mut worker = env.worker("w1", &[], "5s");
    for i in 0..20 {
        let (code, _, err) = approve(&env, &serve, &format!("r{i}"), "ana");
        assert_eq!(code, 0, "{err}");
    }
    for i in 0..20 {
        let (code, intent, err) = approve(&env, &serve, &format!("r{i}"), "bo");
        assert_eq!(code, 0, "{err}");
        assert_eq!(intent["status"], "pending");
    }
    // SIGKILL the moment the last approval is committed: whatever it held, a second worker
    // takes over when its lease runs out.
    worker.kill().await;
    let held = env.held_by("w1").await;
    let second = env.worker("w2", &[], "5s");
    env.wait_count(
        "SELECT count(*) FROM oncebox.intents WHERE status = 'succeeded'",
        20,
    )
    .await;
    assert!(second.stop().await.success());
    let effects = rx.effects();
    for i in 0..20 {
        assert_eq!(effects.get(&dk(&format!("r{i}"))), Some(&1), "r{i}");
    }
    // Every request beyond one per intent has a reason on record: a row the killed worker held
    // (its request may have gone out), or an attempt that timed out (unknown, re-sent under its
    // key) — which a loaded machine makes happen at the 1 s timeout.
    let sent = rx.seen().len();
    let timed_out = env
        .count("SELECT count(*) FROM oncebox.attempts WHERE outcome = 'unknown'")
        .await;
    assert!(
        sent as i64 <= 20 + held + timed_out,
        "{sent} requests: at most one more for each of the {held} rows the killed worker held \
         and the {timed_out} attempts that timed out"
    );
    drop(serve);
    env.drop_db().await;
}

/// An approval policy's notify destination as a test sees it: every request it got (headers
/// and body, in order), answered 503 for the first `refuse` of them and 200 after.
struct Hook {
    url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(axum::http::HeaderMap, axum::body::Bytes)>>>,
}

impl Hook {
    async fn start(refuse: usize) -> Hook {
        use axum::http::StatusCode;
        let seen: std::sync::Arc<std::sync::Mutex<Vec<_>>> = std::sync::Arc::default();
        let kept = seen.clone();
        let app = axum::Router::new().route(
            "/approvals",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let kept = kept.clone();
                    async move {
                        let mut seen = kept.lock().expect("hook");
                        seen.push((headers, body));
                        if seen.len() <= refuse {
                            StatusCode::SERVICE_UNAVAILABLE
                        } else {
                            StatusCode::OK
                        }
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/approvals", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Hook { url, seen }
    }

    /// The requests so far: (Idempotency-Key, body as JSON, the whole request).
    fn requests(&self) -> Vec<(String, Value, (axum::http::HeaderMap, axum::body::Bytes))> {
        self.seen
            .lock()
            .expect("hook")
            .iter()
            .map(|(h, b)| {
                let key = h
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                let body = serde_json::from_slice(b).unwrap_or(Value::Null);
                (key, body, (h.clone(), b.clone()))
            })
            .collect()
    }
}

/// 32 bytes of `a`, as a Standard Webhooks secret.
const HOOK_SECRET: &str = "whsec_YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE=";

#[tokio::test]
async fn each_waiting_intent_is_announced_once_signed_with_its_key_and_link() {
    let rx = receiver(false).await;
    let hook = Hook::start(1).await;
    let text = format!(
        r#"
[actions.create_invoice]
destination = "billing"
redact = [{{ pointer = "/card", mode = "hash" }}]

[actions.create_invoice.approval]
when = {{ type = "object", required = ["amount"], properties = {{ amount = {{ decimalMinimum = "1000" }} }} }}
approvals = 2
notify = "approvals"

[destinations.billing]
kind = "http"
url = "{rx}"
idempotency = "key"
timeout = "1s"
reference_pointer = "/id"

[destinations.approvals]
kind = "http"
url = "{hook}"
idempotency = "key"
timeout = "1s"
signing = {{ secrets = ["{HOOK_SECRET}"] }}
"#,
        rx = rx.url(),
        hook = hook.url,
    );
    let env = Env::new("announce", &text).await;
    let serve = env.serve().await;
    let card = "4111111111111111";
    env.intent("big/1", json!({"amount": "5000.00", "card": card}))
        .await;
    env.intent("small", json!({"amount": "50"})).await;
    env.intent("no", json!({"amount": "2000"})).await;
    // Each intent that waits has its ask row beside the deliver row; a rejection removes it.
    assert_eq!(
        env.count("SELECT count(*) FROM oncebox.outbox WHERE phase = 'ask'")
            .await,
        2
    );
    let (code, _, err) = reject(&env, &serve, "ana", &["no", "--reason", "not ours"]);
    assert_eq!(code, 0, "{err}");

    let worker = env.worker(
        "w",
        &[("ONCEBOX_CONSOLE_URL", "https://ops.example/")],
        "5s",
    );
    env.wait_status("small", "succeeded").await;
    let asks = "SELECT count(*) FROM oncebox.outbox WHERE phase = 'ask'";
    env.wait_until(Duration::from_secs(30), "no ask row left", || async {
        env.count(asks).await == 0
    })
    .await;
    // Refused once (503), taken the second time: two requests, one message, one key.
    let asked = hook.requests();
    assert_eq!(asked.len(), 2, "{asked:?}");
    let (key, body, (headers, bytes)) = &asked[1];
    assert_eq!(key, "approval:t1:big/1");
    assert_eq!(asked[0].2.1, *bytes, "a retry sends the same bytes");
    assert_eq!(body["type"], "approval_requested");
    assert_eq!(body["idempotency_key"], "big/1");
    assert_eq!(body["action"], "create_invoice");
    assert_eq!(body["approvals_needed"], 2);
    assert_eq!(body["arguments"]["amount"], "5000.00");
    assert!(
        !String::from_utf8_lossy(bytes).contains(card),
        "the message carries the redacted arguments: {body}"
    );
    assert_eq!(
        body["console_url"],
        "https://ops.example/console/intents/big%2F1"
    );
    let summary = body["summary"].as_str().unwrap_or("");
    assert!(
        summary.starts_with("create_invoice intent ")
            && summary.contains(" awaits 2 approvals before 20")
            && !summary.contains("big/1"),
        "{summary}"
    );
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    assert_eq!(
        header("x-oncebox-action"),
        Some("oncebox.approval_requested")
    );
    assert_eq!(
        asked[0].2.0.get("webhook-id"),
        headers.get("webhook-id"),
        "the same webhook-id on a retry"
    );
    let signer = oncebox_inbox::webhook::Signer::new(&[HOOK_SECRET]).expect("secret");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    oncebox_inbox::webhook::verify(
        &signer.verifying_keys(),
        header("webhook-id"),
        header("webhook-timestamp"),
        header("webhook-signature"),
        bytes,
        now,
        300,
    )
    .expect("signed as the destination signs deliveries");
    // Nothing reached the receiver that executes refunds.
    assert_eq!(requests(&rx, "big/1"), 0);
    assert_eq!(requests(&rx, "no"), 0);

    // Approved: delivered once; nobody is asked again.
    for person in ["ana", "bo"] {
        let (code, _, err) = approve(&env, &serve, "big/1", person);
        assert_eq!(code, 0, "{err}");
    }
    env.wait_status("big/1", "succeeded").await;
    assert!(worker.stop().await.success());
    assert_eq!(requests(&rx, "big/1"), 1);
    assert_eq!(hook.requests().len(), 2);
    drop(serve);
    env.drop_db().await;
}
