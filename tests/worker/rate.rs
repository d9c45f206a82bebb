//! Pool-wide request rates end to end: four real worker processes share one token bucket in
//! Postgres, so in no stretch of time does the receiver see more than the bucket lets through
//! (its burst and the rate over the stretch), not four times it; a 429 with Retry-After pauses
//! every worker, then deliveries resume; rows over the limit wait without spending attempts.
//! Every figure is counted from the receiver's own arrival times: a slow machine only makes
//! them smaller.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::env::*;
use crate::support::heavy;

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
}

/// The bucket: 200 requests/s, bursts of 20.
const RATE: f64 = 200.0;
const BURST: f64 = 20.0;
/// How long a request may take from its token to its arrival: a stretch of arrivals may hold the
/// tokens of this much more time.
const IN_FLIGHT: Duration = Duration::from_millis(500);

/// The most arrivals in any stretch of `width` (a sliding window over the arrival times).
fn most_within(arrivals: &[Instant], width: Duration) -> usize {
    let mut most = 0;
    let mut start = 0;
    for (end, at) in arrivals.iter().enumerate() {
        while *at - arrivals[start] > width {
            start += 1;
        }
        most = most.max(end + 1 - start);
    }
    most
}

#[tokio::test]
async fn four_workers_hold_one_rate_and_a_retry_after_pauses_them_all() {
    let _heavy = heavy().await;
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
            &format!(
                "retry = {{ max_attempts = 5, initial_delay = \"10ms\", max_delay = \"20ms\" }}\n\
                 rate_limit = {{ per_second = {RATE}, burst = {BURST} }}"
            ),
        )
        .replace("reference_pointer = \"/id\"\n", ""),
    )
    .await;
    // A backlog the limit cannot drain during the test, written directly (the intake is not the
    // test).
    sqlx::query(
        "WITH i AS (INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, \
         request_hash, payload) SELECT 't1', 'r-' || g, 'create_invoice', repeat('0', 64), \
         '{\"n\": 1}' FROM generate_series(1, 5000) g RETURNING id) \
         INSERT INTO oncebox.outbox (intent_id, phase, tenant_id) SELECT id, 'deliver', 't1' FROM i",
    )
    .execute(&env.pool)
    .await
    .expect("backlog");
    let workers: Vec<_> = (0..4)
        .map(|i| env.worker(&format!("r{i}"), &[], "10s"))
        .collect();
    env.wait_until(Duration::from_secs(60), "1,000 deliveries", || async {
        clock.arrivals.lock().expect("lock").len() >= 1_000
    })
    .await;
    let arrivals = clock.arrivals.lock().expect("lock").clone();
    for width in [0.25, 0.5, 1.0, 2.0, 4.0] {
        let width = Duration::from_secs_f64(width);
        let most = most_within(&arrivals, width);
        let allowed = (BURST + RATE * (width + IN_FLIGHT).as_secs_f64()) as usize;
        eprintln!("rate: at most {most} arrivals within {width:?} (the bucket allows {allowed})");
        assert!(
            most <= allowed,
            "{most} requests arrived within {width:?}: four workers share one bucket of \
             {RATE}/s and {BURST} at once, which lets {allowed} through at most"
        );
    }

    // One 429 with Retry-After: 2 pauses every worker: only requests whose tokens were taken
    // before it arrive in the next two seconds; then deliveries resume.
    clock.refuse_once.store(true, Ordering::SeqCst);
    env.wait_until(Duration::from_secs(5), "the 429", || async {
        clock.refused_at.lock().expect("lock").is_some()
    })
    .await;
    let refused = clock.refused_at.lock().expect("lock").expect("refused");
    let pause_ends = refused + Duration::from_secs(2);
    env.wait_until(Duration::from_secs(30), "deliveries to resume", || async {
        clock.between(pause_ends, Instant::now() + Duration::from_secs(1)) >= 50
    })
    .await;
    let during = clock.between(refused + Duration::from_millis(1), pause_ends);
    let on_their_way = (BURST + RATE * IN_FLIGHT.as_secs_f64()) as usize;
    eprintln!("rate: {during} arrivals while paused (at most {on_their_way} on their way)");
    assert!(
        during <= on_their_way,
        "{during} requests arrived in the two seconds after the 429's Retry-After: 2; at most \
         the {on_their_way} already on their way may"
    );

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
