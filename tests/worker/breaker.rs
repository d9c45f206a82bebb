//! Circuit breakers end to end: two real worker processes share one breaker through Postgres.
//! A receiver answering 503 opens it after the configured run of failures; while open, only the
//! probes reach the receiver (counted there); intents wait queued without spending attempts;
//! another destination keeps delivering meanwhile; the receiver back, one probe closes it and
//! everything waiting is delivered once. A 410 Gone disables a destination until an operator
//! enables it with `oncebox ops destinations enable`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use oncebox_core::NewIntent;
use serde_json::json;

use crate::env::*;

/// A receiver whose answer is set from the test (201, 503, 410), counting requests and
/// distinct keys that succeeded.
#[derive(Clone, Default)]
struct Switch {
    answer: Arc<AtomicU32>,
    requests: Arc<AtomicU64>,
    succeeded: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

async fn answer(State(s): State<Switch>, headers: HeaderMap) -> (StatusCode, String) {
    s.requests.fetch_add(1, Ordering::SeqCst);
    let code = s.answer.load(Ordering::SeqCst);
    let status = StatusCode::from_u16(u16::try_from(code).unwrap_or(500))
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if status.is_success() {
        let key = headers
            .get("idempotency-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        s.succeeded.lock().expect("lock").insert(key.clone());
        return (status, json!({"id": key}).to_string());
    }
    (status, "{}".to_owned())
}

async fn switch(code: u32) -> (Switch, String) {
    let s = Switch::default();
    s.answer.store(code, Ordering::SeqCst);
    let app = axum::Router::new()
        .route("/in", axum::routing::post(answer))
        .with_state(s.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/in", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (s, url)
}

fn breaker_config(billing: &str, other: &str) -> String {
    format!(
        r#"
[actions.create_invoice]
destination = "billing"
[actions.send_document]
destination = "docs"

[destinations.billing]
kind = "http"
url = "{billing}"
idempotency = "key"
timeout = "1s"
retry = {{ max_attempts = 1000, initial_delay = "20ms", max_delay = "50ms" }}
breaker = {{ failures = 3, cool_down = "1s" }}

[destinations.docs]
kind = "http"
url = "{other}"
idempotency = "key"
timeout = "1s"
"#
    )
}

async fn state_of(env: &Env, destination: &str) -> Option<String> {
    sqlx::query_scalar("SELECT state FROM oncebox.destination_state WHERE destination = $1")
        .bind(destination)
        .fetch_optional(&env.pool)
        .await
        .expect("state")
}

#[tokio::test]
async fn an_open_breaker_lets_only_probes_through_and_closes_when_the_receiver_returns() {
    let (billing, billing_url) = switch(503).await;
    let (docs, docs_url) = switch(201).await;
    let env = Env::new("breaker", &breaker_config(&billing_url, &docs_url)).await;
    for i in 0..20 {
        env.intent(format!("inv-{i}"), json!({"n": i})).await;
    }
    let w1 = env.worker("b1", &[], "5s");
    let w2 = env.worker("b2", &[], "5s");
    env.wait_until(Duration::from_secs(20), "the breaker opens", || async {
        state_of(&env, "billing").await.as_deref() == Some("open")
    })
    .await;
    // Open: watch the receiver for a while. Two workers, a cool-down of 1 s: a handful of
    // probes at most (one per cool-down), never the stream of retries.
    let before = billing.requests.load(Ordering::SeqCst);
    let since = tokio::time::Instant::now();
    // Meanwhile another destination delivers as usual.
    for i in 0..10 {
        env.submit(NewIntent::new(
            "t1",
            format!("doc-{i}"),
            "send_document",
            json!({"n": i}),
        ))
        .await;
    }
    env.wait_until(
        Duration::from_secs(10),
        "the other destination delivers",
        || async { docs.succeeded.lock().expect("lock").len() == 10 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = billing.requests.load(Ordering::SeqCst) - before;
    let watched = since.elapsed();
    // One probe per cool-down (1 s) for the whole pool, and the failures already in flight
    // when it opened (each worker sends at most one batch before it reads the new state).
    let allowed = watched.as_secs_f64().ceil() as u64 + 4;
    assert!(
        during <= allowed,
        "{during} requests reached an open destination in {watched:?} (at most {allowed})"
    );
    assert_ne!(state_of(&env, "billing").await.as_deref(), Some("closed"));
    let attempts_while_open: i64 = env
        .count("SELECT count(*) FROM oncebox.attempts WHERE outcome = 'retry_before_execution'")
        .await;
    let requests = i64::try_from(billing.requests.load(Ordering::SeqCst)).unwrap_or(0);
    assert!(
        attempts_while_open <= requests,
        "only requests sent are attempts; waiting intents spend none: {attempts_while_open} \
         attempts, {requests} requests"
    );
    let (code, listed, _) = ops(&env, &["destinations", "list"]);
    assert_eq!(code, 0);
    assert_eq!(listed[0]["destination"], "billing", "{listed}");

    // The receiver is back: the next probe closes the breaker; everything is delivered once.
    billing.answer.store(201, Ordering::SeqCst);
    env.wait_until(Duration::from_secs(20), "everything delivered", || async {
        env.open().await == 0
    })
    .await;
    assert_eq!(state_of(&env, "billing").await.as_deref(), Some("closed"));
    assert_eq!(billing.succeeded.lock().expect("lock").len(), 20);
    let counts = env.status_counts().await;
    assert_eq!(counts.get("succeeded"), Some(&30), "{counts:?}");
    assert!(w1.stop().await.success());
    assert!(w2.stop().await.success());
    env.drop_db().await;
}

#[tokio::test]
async fn a_410_disables_the_destination_until_an_operator_enables_it() {
    let (billing, billing_url) = switch(410).await;
    let (_docs, docs_url) = switch(201).await;
    let env = Env::new("gone", &breaker_config(&billing_url, &docs_url)).await;
    env.intent("gone-1", json!({"n": 1})).await;
    let worker = env.worker("g1", &[], "5s");
    env.wait_status("gone-1", "failed").await;
    env.wait_until(Duration::from_secs(10), "disabled", || async {
        state_of(&env, "billing").await.as_deref() == Some("disabled")
    })
    .await;
    // Disabled: new intents wait, nothing reaches the receiver.
    billing.answer.store(201, Ordering::SeqCst);
    let before = billing.requests.load(Ordering::SeqCst);
    env.intent("later-1", json!({"n": 2})).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(billing.requests.load(Ordering::SeqCst), before);
    assert_eq!(env.status_of("later-1").await, "pending");
    let (code, listed, _) = ops(&env, &["destinations", "list"]);
    assert_eq!(code, 0);
    assert_eq!(listed[0]["state"], "disabled", "{listed}");
    assert!(
        listed[0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("410")),
        "{listed}"
    );
    // Enabled by an operator: the waiting intent is delivered.
    let (code, listed, err) = ops(&env, &["destinations", "enable", "billing"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(listed[0]["state"], "closed", "{listed}");
    env.wait_status("later-1", "succeeded").await;
    // An operator can disable one too, with a reason.
    let (code, listed, _) = ops(
        &env,
        &[
            "destinations",
            "disable",
            "billing",
            "--reason",
            "maintenance",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(listed[0]["reason"], "operator: maintenance");
    let (code, _, err) = ops(
        &env,
        &["destinations", "disable", "billing", "--reason", " "],
    );
    assert_eq!(code, 2, "{err}");
    assert!(worker.stop().await.success());
    env.drop_db().await;
}
