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
use oncebox_core::{IntentNames, NewIntent};
use serde_json::json;

use crate::env::*;

/// A receiver whose answer is set from the test (201, 503, 410), noting every request: its key,
/// when it arrived, whether it was answered with success, and — once given the test's database —
/// the state of its breaker when it arrived (a probe arrives while it is half-open).
#[derive(Clone, Default)]
struct Switch {
    answer: Arc<AtomicU32>,
    requests: Arc<AtomicU64>,
    seen: Arc<std::sync::Mutex<Vec<Request>>>,
    breaker: Arc<std::sync::OnceLock<(sqlx::PgPool, String)>>,
}

#[derive(Clone, Debug)]
struct Request {
    key: String,
    at: tokio::time::Instant,
    succeeded: bool,
    breaker: Option<String>,
}

impl Switch {
    fn seen(&self) -> Vec<Request> {
        self.seen.lock().expect("lock").clone()
    }

    /// The keys answered with success, each as often as it was.
    fn succeeded(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .seen()
            .into_iter()
            .filter(|r| r.succeeded)
            .map(|r| r.key)
            .collect();
        keys.sort();
        keys
    }
}

async fn answer(State(s): State<Switch>, headers: HeaderMap) -> (StatusCode, String) {
    let at = tokio::time::Instant::now();
    s.requests.fetch_add(1, Ordering::SeqCst);
    let code = s.answer.load(Ordering::SeqCst);
    let status = StatusCode::from_u16(u16::try_from(code).unwrap_or(500))
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let breaker = match s.breaker.get() {
        Some((pool, destination)) => {
            sqlx::query_scalar("SELECT state FROM oncebox.destination_state WHERE destination = $1")
                .bind(destination)
                .fetch_optional(pool)
                .await
                .expect("breaker state")
        }
        None => None,
    };
    s.seen.lock().expect("lock").push(Request {
        key: key.clone(),
        at,
        succeeded: status.is_success(),
        breaker,
    });
    if status.is_success() {
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

/// Two workers share one breaker. Once it is open, the receiver sees only probes, one per
/// cool-down for the whole pool: by the receiver's own clock no two probes come closer than the
/// cool-down (one per worker would come in pairs). The receiver back, every waiting intent is
/// delivered with exactly one successful request.
#[tokio::test]
async fn an_open_breaker_lets_only_probes_through_and_closes_when_the_receiver_returns() {
    const COOL_DOWN: Duration = Duration::from_secs(1);
    let (billing, billing_url) = switch(503).await;
    let (docs, docs_url) = switch(201).await;
    let env = Env::new("breaker", &breaker_config(&billing_url, &docs_url)).await;
    for i in 0..20 {
        env.intent(format!("inv-{i}"), json!({"n": i})).await;
    }
    // One call at a time per worker: when the breaker opens, each has at most one request on
    // its way, and every later request is a probe.
    let _ = billing
        .breaker
        .set((env.pool.clone(), "billing".to_owned()));
    let w1 = env.worker_with("b1", &[], "5s", &["--concurrency", "1"]);
    let w2 = env.worker_with("b2", &[], "5s", &["--concurrency", "1"]);
    env.wait_until(Duration::from_secs(20), "the breaker opens", || async {
        state_of(&env, "billing").await.as_deref() == Some("open")
    })
    .await;
    // Meanwhile another destination delivers as usual.
    for i in 0..10 {
        env.submit(NewIntent::new(
            IntentNames {
                tenant_id: "t1",
                idempotency_key: &format!("doc-{i}"),
                action: "send_document",
            },
            json!({"n": i}),
        ))
        .await;
    }
    env.wait_until(
        Duration::from_secs(10),
        "the other destination delivers",
        || async { docs.succeeded().len() == 10 },
    )
    .await;
    // A probe is a request that arrives while the breaker is half-open (its claim made it so);
    // one that arrives while it is open was on its way when it opened.
    let probes = || -> Vec<tokio::time::Instant> {
        let seen = billing.seen();
        seen.iter()
            .filter(|r| r.breaker.as_deref() == Some("half_open"))
            .map(|r| r.at)
            .collect()
    };
    env.wait_until(Duration::from_secs(30), "four probes", || async {
        probes().len() >= 4
    })
    .await;
    let probes = probes();
    let late = billing
        .seen()
        .iter()
        .filter(|r| r.breaker.as_deref() == Some("open"))
        .count();
    assert!(
        late <= 2,
        "{late} requests reached the open breaker: only the one each worker had on its way may"
    );
    for pair in probes.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= COOL_DOWN,
            "two probes {gap:?} apart: one per cool-down for the pool ({:?})",
            probes.windows(2).map(|p| p[1] - p[0]).collect::<Vec<_>>()
        );
    }
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

    // The receiver is back: the next probe closes the breaker; every intent is delivered with
    // one successful request, none twice.
    billing.answer.store(201, Ordering::SeqCst);
    env.wait_until(Duration::from_secs(20), "everything delivered", || async {
        env.open().await == 0
    })
    .await;
    assert_eq!(state_of(&env, "billing").await.as_deref(), Some("closed"));
    let expected: Vec<String> = {
        let mut keys: Vec<String> = (0..20).map(|i| dk(&format!("inv-{i}"))).collect();
        keys.sort();
        keys
    };
    assert_eq!(billing.succeeded(), expected, "each intent once");
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
    // Disabled: a new intent waits, parked by the worker that claimed it; nothing reaches the
    // receiver.
    billing.answer.store(201, Ordering::SeqCst);
    let before = billing.requests.load(Ordering::SeqCst);
    env.intent("later-1", json!({"n": 2})).await;
    env.wait_until(Duration::from_secs(10), "later-1 parked", || async {
        env.count(
            "SELECT count(*) FROM oncebox.outbox WHERE epoch >= 1 AND lease_owner IS NULL \
             AND available_at > now() + interval '1 minute'",
        )
        .await
            == 1
    })
    .await;
    assert_eq!(billing.requests.load(Ordering::SeqCst), before);
    assert_eq!(env.status_of("later-1").await, "pending");
    assert_eq!(reports(&env, "later-1").await, Vec::<String>::new());
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
