//! Pool-wide request rates end to end: four real worker processes share one token bucket in
//! Postgres, so a receiver sees the configured rate over 20 s (± 15 %), not four times it; a 429
//! with Retry-After pauses every worker, then the rate recovers; rows over the limit wait without
//! spending attempts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::env::*;

/// Records when each request arrived; answers 201, or one 429 with `Retry-After: 2` when armed.
#[derive(Clone, Default)]
struct Clock {
    arrivals: Arc<Mutex<Vec<Instant>>>,
    refuse_once: Arc<AtomicBool>,
    refused_at: Arc<Mutex<Option<Instant>>>,
}

async fn arrive(State(c): State<Clock>) -> (StatusCode, HeaderMap, &'static str) {
    let now = Instant::now();
    c.arrivals.lock().expect("lock").push(now);
    let mut headers = HeaderMap::new();
    if c.refuse_once.swap(false, Ordering::SeqCst) {
        *c.refused_at.lock().expect("lock") = Some(now);
        headers.insert("retry-after", "2".parse().expect("header"));
        return (StatusCode::TOO_MANY_REQUESTS, headers, "{}");
    }
    (StatusCode::CREATED, headers, "{}")
}

impl Clock {
    fn between(&self, from: Instant, to: Instant) -> usize {
        let arrivals = self.arrivals.lock().expect("lock");
        arrivals.iter().filter(|t| **t >= from && **t < to).count()
    }

    fn first(&self) -> Option<Instant> {
        self.arrivals.lock().expect("lock").first().copied()
    }
}

#[tokio::test]
async fn four_workers_hold_one_rate_and_a_retry_after_pauses_them_all() {
    let _heavy = HEAVY.lock().await;
    let clock = Clock::default();
    let app = axum::Router::new()
        .route("/in", axum::routing::post(arrive))
        .with_state(clock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/in", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let env = Env::new(
        "rate",
        &config(
            &url,
            "key",
            "retry = { max_attempts = 5, initial_delay = \"10ms\", max_delay = \"20ms\" }\n\
             rate_limit = { per_second = 200, burst = 20 }",
        )
        .replace("reference_pointer = \"/id\"\n", ""),
    )
    .await;
    // A backlog far larger than 25 s at the rate, written directly (the intake is not the test).
    sqlx::query(
        "WITH i AS (INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, \
         request_hash, payload) SELECT 't1', 'r-' || g, 'create_invoice', repeat('0', 64), \
         '{\"n\": 1}' FROM generate_series(1, 8000) g RETURNING id) \
         INSERT INTO oncebox.outbox (intent_id, phase, tenant_id) SELECT id, 'deliver', 't1' FROM i",
    )
    .execute(&env.pool)
    .await
    .expect("backlog");
    let workers: Vec<_> = (0..4)
        .map(|i| env.worker(&format!("r{i}"), &[], "10s"))
        .collect();
    env.wait_until(Duration::from_secs(20), "a first delivery", || async {
        clock.first().is_some()
    })
    .await;
    // Past the initial burst, 20 s of deliveries.
    let start = clock.first().expect("first") + Duration::from_secs(1);
    let end = start + Duration::from_secs(20);
    tokio::time::sleep_until(end).await;
    let seen = clock.between(start, end);
    let rate = seen as f64 / 20.0;
    assert!(
        (170.0..=230.0).contains(&rate),
        "four workers together sent {rate:.1}/s over 20 s; the limit is 200/s ± 15%"
    );

    // One 429 with Retry-After: 2 pauses every worker; then the rate comes back.
    clock.refuse_once.store(true, Ordering::SeqCst);
    env.wait_until(Duration::from_secs(5), "the 429", || async {
        clock.refused_at.lock().expect("lock").is_some()
    })
    .await;
    let refused = clock.refused_at.lock().expect("lock").expect("refused");
    tokio::time::sleep_until(refused + Duration::from_secs(3)).await;
    // Requests already past the bucket when the 429 came may still arrive; then silence.
    let paused = clock.between(
        refused + Duration::from_millis(300),
        refused + Duration::from_millis(1700),
    );
    assert!(
        paused <= 5,
        "{paused} requests arrived while the destination was paused by Retry-After"
    );
    let after = clock.between(
        refused + Duration::from_millis(2300),
        refused + Duration::from_secs(3),
    );
    assert!(
        after > 50,
        "the rate did not recover after the pause: {after} in 0.7 s"
    );

    eprintln!("rate over 20 s: {rate:.1}/s; during the pause: {paused}; 0.7 s after it: {after}");
    for w in workers {
        assert!(w.stop().await.success());
    }
    // Waiting rows spent no attempts: every attempt made is a request that arrived.
    let attempts: i64 = env.count("SELECT count(*) FROM oncebox.attempts").await;
    let arrived = i64::try_from(clock.arrivals.lock().expect("lock").len()).unwrap_or(0);
    assert!(
        attempts <= arrived,
        "{attempts} attempts recorded for {arrived} requests"
    );
    env.drop_db().await;
}
