//! Delivery: retries with Retry-After, deadlines and exhausted attempts; wake-ups by NOTIFY
//! alone, and the notify rate past which a worker polls instead; cancelled intents never sent;
//! a panicking service stopping the worker; an outcome stuck on a lock not holding up others.

use std::time::{Duration, SystemTime};

use oncebox_core::{IntentNames, NewIntent};
use serde_json::{Value, json};

use crate::env::*;
use crate::support::free_addr;

#[tokio::test]
async fn retry_after_deadline_and_exhausted_attempts() {
    let rx = receiver(true).await;
    let env = Env::new(
        "retries",
        &config(&rx.url(), "key", "[destinations.billing.retry]\nmax_attempts = 3\ninitial_delay = \"50ms\"\nmax_delay = \"100ms\""),
    )
    .await;
    env.intent("retry-after", json!({"faults": ["503:2", "ok"]}))
        .await;
    env.submit(NewIntent {
        deadline: Some(SystemTime::now() + Duration::from_millis(1500)),
        ..NewIntent::new(
            IntentNames {
                tenant_id: "t1",
                idempotency_key: "deadline",
                action: "create_invoice",
            },
            json!({"faults": ["503:5", "ok"]}),
        )
    })
    .await;
    env.intent(
        "exhausted",
        json!({"faults": ["429:0", "503:0", "503:0", "ok"]}),
    )
    .await;
    env.intent("refused", json!({"faults": ["400"]})).await;
    let metrics_addr = free_addr();
    let worker = env.worker_with("w", &[], "5s", &["--metrics-addr", &metrics_addr]);
    env.wait_until(Duration::from_secs(30), "all terminal", || async {
        env.open().await == 0
    })
    .await;
    let metrics = scrape(&metrics_addr).await;
    assert!(worker.stop().await.success());
    // Whole series, whole values: `… 1` must not match `… 10`.
    for (series, value) in [
        (
            "oncebox_deliveries_total{destination=\"billing\",outcome=\"succeeded\"}",
            1.0,
        ),
        (
            "oncebox_deliveries_total{destination=\"billing\",outcome=\"retry_before_execution\"}",
            5.0,
        ),
        (
            "oncebox_deliveries_total{destination=\"billing\",outcome=\"permanent\"}",
            1.0,
        ),
        (
            "oncebox_delivery_seconds_count{destination=\"billing\"}",
            7.0,
        ),
        ("oncebox_leases_lost_total", 0.0),
    ] {
        assert_eq!(
            metric(&metrics, series),
            Some(value),
            "{series} in /metrics:\n{metrics}"
        );
    }
    for series in [
        "oncebox_ready_depth",
        "oncebox_oldest_ready_age_seconds",
        "oncebox_claim_batch_size_count",
    ] {
        assert!(
            metric(&metrics, series).is_some(),
            "/metrics lacks {series}:\n{metrics}"
        );
    }

    let seen = rx.seen();
    let times = |key: &str| {
        seen.iter()
            .filter(|s| s.key == dk(key))
            .map(|s| s.at)
            .collect::<Vec<_>>()
    };
    let ra = times("retry-after");
    assert_eq!(ra.len(), 2);
    assert!(
        ra[1] - ra[0] >= Duration::from_secs(2),
        "second attempt {:?} after the first",
        ra[1] - ra[0]
    );
    assert_eq!(env.status_of("retry-after").await, "succeeded");

    assert_eq!(times("deadline").len(), 1, "no attempt after the deadline");
    assert_eq!(env.status_of("deadline").await, "expired");

    assert_eq!(times("exhausted").len(), 3, "max_attempts = 3");
    assert_eq!(env.status_of("exhausted").await, "failed");
    let error: Value = env
        .scalar("SELECT last_error FROM oncebox.intents WHERE idempotency_key = 'exhausted'")
        .await;
    assert_eq!(error["status_code"], 503);

    assert_eq!(times("refused").len(), 1);
    assert_eq!(env.status_of("refused").await, "failed");
    let attempts = env.count("SELECT count(*) FROM oncebox.attempts").await;
    assert_eq!(attempts, 2 + 1 + 3 + 1, "one report row per attempt");
    assert_eq!(
        rx.total_effects(),
        1,
        "only retry-after's second attempt executed"
    );
    env.drop_db().await;
}

#[tokio::test]
async fn work_still_arrives_after_the_listen_connection_is_cut() {
    let rx = receiver(true).await;
    let env = Env::new("relisten", &config(&rx.url(), "key", "")).await;
    // Polling far longer than the test: only NOTIFY can wake this worker.
    let worker = env.worker_with("w", &[], "5s", &["--poll-interval", "1h"]);
    env.intent("before", json!({})).await;
    env.wait_status("before", "succeeded").await;
    // Wait until the worker is idle on LISTEN (it registers as waiting), then cut its LISTEN
    // connection from the server side.
    env.wait_count(
        "SELECT count(*) FROM oncebox.waiting_workers WHERE worker = 'w'",
        1,
    )
    .await;
    let cut = env
        .count(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'LISTEN%') t",
        )
        .await;
    assert_eq!(cut, 1, "the worker had one LISTEN connection");
    // One at a time, each delivered before the next is submitted: after the cut the worker
    // listens again and claims once to catch up on what it may have missed — that can find at
    // most the first; every later one is found only because its NOTIFY woke the worker.
    for i in 0..5 {
        let key = format!("after-{i}");
        env.intent(key.clone(), json!({})).await;
        env.wait_status(&key, "succeeded").await;
    }
    assert!(worker.stop().await.success());
    assert_eq!(rx.total_effects(), 6);
    env.drop_db().await;
}

#[tokio::test]
async fn a_worker_listens_below_its_notify_rate_and_polls_above_it() {
    let rx = receiver(true).await;
    let env = Env::new("notifyrate", &config(&rx.url(), "key", "")).await;
    // Polling far longer than the test, a notify rate of 50/s: below it only NOTIFY can wake
    // the worker, above it the worker must deregister (submits stop notifying) and poll.
    let args = ["--poll-interval", "1h", "--notify-below", "50"];
    let worker = env.worker_with("w", &[], "5s", &args);
    const REGISTERED: &str = "SELECT count(*) FROM oncebox.waiting_workers WHERE worker = 'w'";
    env.wait_count(REGISTERED, 1).await;
    // Slowly, one at a time: each is woken by its own NOTIFY, and the worker stays registered
    // between them (the old policy deregistered on every claim that found work).
    for i in 0..5 {
        let key = format!("slow-{i}");
        env.intent(key.clone(), json!({})).await;
        env.wait_status(&key, "succeeded").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(env.count(REGISTERED).await, 1, "deregistered at {key}");
    }
    // A burst far above 50/s from 8 submitters, watched for the worker's deregistration. The
    // worker measures its rate over 250 ms windows, so a burst that ends within one window may
    // never show it: the submitters go on until the watcher has seen the worker deregister, or
    // until each has submitted 400 intents (seconds at these rates).
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let deregistered = std::sync::Arc::new(AtomicBool::new(false));
    let (pool, seen) = (env.pool.clone(), deregistered.clone());
    let watcher = tokio::spawn(async move {
        for _ in 0..5000 {
            let n: i64 = sqlx::query_scalar(REGISTERED)
                .fetch_one(&pool)
                .await
                .expect("count");
            if n == 0 {
                seen.store(true, SeqCst);
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let env = std::sync::Arc::new(env);
    let burst: Vec<_> = (0..8)
        .map(|t| {
            let (env, deregistered) = (env.clone(), deregistered.clone());
            tokio::spawn(async move {
                let mut sent = 0;
                while sent < 400 && (sent < 60 || !deregistered.load(SeqCst)) {
                    env.intent(format!("burst-{t}-{sent}"), json!({})).await;
                    sent += 1;
                }
                sent
            })
        })
        .collect();
    let mut burst_sent = 0;
    for b in burst {
        burst_sent += b.await.expect("submitter");
    }
    watcher.await.expect("watcher");
    assert!(
        deregistered.load(SeqCst),
        "the worker never stopped waiting while the burst came in"
    );
    env.wait_until(
        Duration::from_secs(30),
        "the burst to be delivered",
        || async { env.count("SELECT count(*) FROM oncebox.outbox").await == 0 },
    )
    .await;
    // Quiet again: it registers within a second or so, and NOTIFY alone wakes it once more.
    env.wait_count(REGISTERED, 1).await;
    env.intent("after", json!({})).await;
    env.wait_status("after", "succeeded").await;
    assert!(worker.stop().await.success());
    assert_eq!(rx.total_effects(), 5 + burst_sent + 1);
    match std::sync::Arc::try_unwrap(env) {
        Ok(env) => env.drop_db().await,
        Err(_) => panic!("the submitters still hold the environment"),
    }
}

#[tokio::test]
async fn cancelled_intents_are_never_dispatched() {
    let rx = receiver(false).await;
    let env = Env::new("cancelled", &config(&rx.url(), "key", "")).await;
    env.intent("cancelled-1", json!({})).await;
    env.intent("kept-1", json!({})).await;
    // Cancelled while its row was already queued for a worker: the race `oncebox ops cancel` avoids
    // by deleting the row in the same transaction, written here by hand so that the worker meets
    // a terminal intent it must clear and never send.
    sqlx::query(
        "UPDATE oncebox.intents SET status = 'cancelled', completed_at = '2026-01-01T00:00:00Z',
                last_error = '{\"code\": \"operator\", \"detail\": \"by ops\"}'
         WHERE idempotency_key = 'cancelled-1'",
    )
    .execute(&env.pool)
    .await
    .expect("cancel");
    let worker = env.worker("w", &[], "5s");
    env.wait_until(Duration::from_secs(20), "the queue to empty", || async {
        env.count("SELECT count(*) FROM oncebox.outbox").await == 0
    })
    .await;
    assert!(worker.stop().await.success());
    assert_eq!(env.status_of("kept-1").await, "succeeded");
    assert_eq!(env.status_of("cancelled-1").await, "cancelled");
    let (completed, error): (String, Value) = sqlx::query_as(
        "SELECT completed_at::date::text, last_error FROM oncebox.intents WHERE idempotency_key = 'cancelled-1'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("cancelled row");
    assert_eq!(
        completed, "2026-01-01",
        "a terminal intent is never rewritten"
    );
    assert_eq!(error["detail"], "by ops");
    let keys: Vec<String> = rx.seen().into_iter().map(|s| s.key).collect();
    assert_eq!(
        keys,
        [dk("kept-1")],
        "the cancelled intent never reached the receiver"
    );
    env.drop_db().await;
}

/// The completer writes one record statement at a time, so that outcomes batch up behind it, but
/// one stuck on a lock must not hold up the rest: here another transaction holds the journal row
/// of the first intent, so the statement recording its outcome waits on the lock; the second
/// intent is delivered and recorded while the lock is still held, and the first is recorded
/// once it is released. Each was delivered once.
#[tokio::test]
async fn an_outcome_stuck_on_a_row_lock_does_not_hold_up_the_others() {
    let rx = receiver(true).await;
    let env = Env::new("record_lock", &config(&rx.url(), "key", "")).await;
    env.intent("locked-1", json!({})).await;
    let mut holder = env.pool.begin().await.expect("begin");
    sqlx::query(
        "SELECT 1 FROM oncebox.intents WHERE idempotency_key = 'locked-1' FOR NO KEY UPDATE",
    )
    .execute(&mut *holder)
    .await
    .expect("lock the journal row");
    let worker = env.worker("w", &[], "30s");
    // The record of locked-1 is waiting on the lock before the next intent exists, so the two
    // outcomes cannot share a statement.
    env.wait_until(
        Duration::from_secs(20),
        "the record statement to wait on the lock",
        || async {
            env.count(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .await
                == 1
        },
    )
    .await;
    env.intent("free-1", json!({})).await;
    env.wait_status("free-1", "succeeded").await;
    assert_ne!(
        env.status_of("locked-1").await,
        "succeeded",
        "the locked journal row cannot have been written yet"
    );
    holder.commit().await.expect("release the lock");
    env.wait_status("locked-1", "succeeded").await;
    assert!(worker.stop().await.success());
    let mut keys: Vec<String> = rx.seen().into_iter().map(|s| s.key).collect();
    keys.sort();
    assert_eq!(keys, [dk("free-1"), dk("locked-1")], "each delivered once");
    env.drop_db().await;
}

/// A service that panics stops the whole worker: the others stop as on SIGTERM, the process
/// exits non-zero (so that whatever runs it restarts it) and the log names the service.
#[tokio::test]
async fn a_panicking_service_stops_the_worker_with_a_non_zero_exit_naming_it() {
    let env = Env::new("panic", &config("http://127.0.0.1:9/x", "key", "")).await;
    for service in ["gauges", "claimer", "completer"] {
        let point = format!("panic:{service}");
        let (mut worker, log) = env.worker_logged(service, &[("ONCEBOX_CRASH_AT", &point)]);
        let status = worker.exited().await;
        let log = std::fs::read_to_string(&log).expect("log");
        assert_eq!(status.code(), Some(1), "{service}: {status:?}\n{log}");
        assert!(
            log.contains(&format!("error: the {service} service panicked")),
            "the error names the {service} service:\n{log}"
        );
        assert!(
            log.contains(&format!("service=\"{service}\"")),
            "the log line names the service:\n{log}"
        );
    }
    // Without the hook, the same worker runs until SIGTERM and exits 0.
    let worker = env.worker("calm", &[], "5s");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(worker.stop().await.success());
    env.drop_db().await;
}
