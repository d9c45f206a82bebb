//! The scaled deployment: workers added and removed mid-drain.

use std::io::Write as _;
use std::time::{Duration, Instant};

use oncebox_core::{IntentNames, NewIntent};
use serde_json::json;

use crate::env::*;
use crate::support::{Proc, free_addr, heavy};

/// The scaled deployment: 10,000 intents drained by one worker, then four, then scaled down by
/// SIGTERM (three) and SIGKILL (one) with a replacement, as a Deployment would. Every intent ends
/// succeeded with exactly one effect; a gracefully stopped worker leaves no lease behind.
///
/// The drain's pace is set by the test, not the machine: each worker makes 8 calls at a time and
/// each first call takes the receiver 20 ms, so four workers deliver at most 1,600/s — whatever
/// is left when the pool is scaled down (about half) takes seconds, and the scale-down happens
/// mid-drain by construction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_the_pool_up_and_down_loses_and_duplicates_nothing() {
    let _heavy = heavy().await;
    const N: usize = 10_000;
    let rx = receiver(true).await;
    let env = Env::new("scale", &config(&rx.url(), "key", "")).await;
    // The backlog, 500 intents per transaction. Each first request takes the receiver 20 ms, so
    // workers spend their time waiting on the network, as they do in production.
    for chunk in 0..N / 500 {
        let mut tx = env.pool.begin().await.expect("begin");
        for i in chunk * 500..(chunk + 1) * 500 {
            env.intake
                .submit(
                    &mut tx,
                    NewIntent::new(
                        IntentNames {
                            tenant_id: "t1",
                            idempotency_key: &format!("scale-{i}"),
                            action: "create_invoice",
                        },
                        json!({"n": i, "faults": ["slow:20"]}),
                    ),
                )
                .await
                .expect("submit");
        }
        tx.commit().await.expect("commit");
    }
    let spawn = |id: &str, metrics: &str| {
        env.worker_with(
            id,
            &[],
            "3s",
            &["--metrics-addr", metrics, "--concurrency", "8"],
        )
    };
    let done = || rx.total_effects() as usize;
    // Progress is counted at the receiver; rates are effects per second over a phase.
    let wait_for = |target: usize, limit: Duration| async move {
        let start = Instant::now();
        while done() < target {
            assert!(
                start.elapsed() < limit,
                "only {} of {target} effects after {limit:?}",
                done()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };

    let first_addr = free_addr();
    let mut first = spawn("scale-w1", &first_addr);
    wait_for(300, Duration::from_secs(60)).await; // started and warm
    let (t0, n0) = (Instant::now(), done());
    wait_for(n0 + 1_500, Duration::from_secs(120)).await;
    let one_worker = (done() - n0) as f64 / t0.elapsed().as_secs_f64();

    let added: Vec<(String, String, Proc)> = (2..=4)
        .map(|w| {
            let (id, addr) = (format!("scale-w{w}"), free_addr());
            let child = spawn(&id, &addr);
            (id, addr, child)
        })
        .collect();
    wait_for(done() + 300, Duration::from_secs(60)).await; // the new workers are in
    let (t1, n1) = (Instant::now(), done());
    wait_for(n1 + 3_000, Duration::from_secs(120)).await;
    let four_workers = (done() - n1) as f64 / t1.elapsed().as_secs_f64();
    // Straight to stderr, past the test harness's capture: CI logs show the figures.
    let _ = writeln!(
        std::io::stderr(),
        "scaling: drain rate 1 worker {one_worker:.0}/s, 4 workers {four_workers:.0}/s, ratio {:.2}",
        four_workers / one_worker
    );

    // Scale down mid-drain: SIGTERM the three added workers.
    let left_before = N - done();
    assert!(
        left_before > 2_000,
        "still draining when scaling down ({left_before} left)"
    );
    for (id, addr, child) in added {
        let metrics = scrape(&addr).await;
        assert_eq!(
            metric(&metrics, "oncebox_leases_lost_total"),
            Some(0.0),
            "{id} lost no lease while running"
        );
        let status = child.stop().await;
        assert!(status.success(), "{id} exits 0 after SIGTERM: {status:?}");
        let held: i64 =
            sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox WHERE lease_owner = $1")
                .bind(&id)
                .fetch_one(&env.pool)
                .await
                .expect("held");
        assert_eq!(
            held, 0,
            "{id} stopped gracefully and left no lease to expire"
        );
    }
    // Then the last original worker dies hard, mid-drain, and a replacement takes over once its
    // leases expire.
    assert!(done() < N, "still draining when the last worker is killed");
    first.kill().await;
    // What it held when it died: in flight, or answered but not yet recorded.
    let held_by_killed = env
        .count("SELECT count(*) FROM oncebox.outbox WHERE lease_owner = 'scale-w1'")
        .await;
    let replacement = spawn("scale-w5", &free_addr());
    env.wait_until(
        Duration::from_secs(240),
        "every intent terminal",
        || async {
            env.count("SELECT count(*) FROM oncebox.intents WHERE completed_at IS NULL")
                .await
                == 0
        },
    )
    .await;
    assert!(replacement.stop().await.success());

    assert_eq!(
        env.status_counts().await.get("succeeded"),
        Some(&(N as i64))
    );
    let effects = rx.effects();
    assert_eq!(effects.len(), N, "an effect for every key");
    let wrong: Vec<_> = effects.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        wrong.is_empty(),
        "keys without exactly one effect: {wrong:?}"
    );
    // Only what the SIGKILLed worker held can have been sent twice (and was answered from the
    // receiver's key store, not executed again): nothing of the gracefully stopped ones.
    let resent = rx.seen().len() - N;
    assert!(
        resent as i64 <= held_by_killed,
        "{resent} requests re-sent; at most the {held_by_killed} rows the killed worker held may be"
    );
    let _ = writeln!(
        std::io::stderr(),
        "scaling: {N} intents, {resent} re-sent of the {held_by_killed} the SIGKILLed worker held, 0 duplicates"
    );
    env.drop_db().await;
}
