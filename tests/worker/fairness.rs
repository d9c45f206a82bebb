//! Fairness between tenants: a tenant with a large backlog does not starve another.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use oncebox_core::NewIntent;
use oncebox_receiver::Receiver;
use serde_json::json;

use crate::env::*;

/// Every request takes the receiver this long, as a real payment or billing API takes time: the
/// pool is busy waiting on the network, not on the CPU.
const RECEIVER_MS: u64 = 20;

/// Submits 100 intents of `tenant`, one every 10 ms, and returns the latency of each — from its
/// submit's commit to the end of its effect at the receiver (its arrival plus the receiver's
/// `RECEIVER_MS`) — sorted.
async fn hundred_paced(env: &Env, rx: &Receiver, tenant: &str, prefix: &str) -> Vec<Duration> {
    let mut committed: HashMap<String, Instant> = HashMap::new();
    for i in 0..100 {
        let key = format!("{prefix}-{i}");
        env.submit(NewIntent::new(
            tenant,
            key.clone(),
            "create_invoice",
            json!({"n": i, "faults": [format!("slow:{RECEIVER_MS}")]}),
        ))
        .await;
        committed.insert(key, Instant::now());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    env.wait_until(
        Duration::from_secs(120),
        "the 100 intents arrived",
        || async {
            let effects = rx.effects();
            committed.keys().all(|k| effects.contains_key(k))
        },
    )
    .await;
    // The first arrival of each key (a re-send after a timeout arrives again later).
    let mut first: HashMap<String, Instant> = HashMap::new();
    for seen in rx.seen() {
        if committed.contains_key(&seen.key) {
            first.entry(seen.key).or_insert(seen.at);
        }
    }
    let mut latencies: Vec<Duration> = first
        .iter()
        .map(|(key, at)| {
            at.saturating_duration_since(committed[key]) + Duration::from_millis(RECEIVER_MS)
        })
        .collect();
    latencies.sort();
    assert_eq!(latencies.len(), 100);
    latencies
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Tenant A has a backlog of 20,000; tenant B's 100 new intents are delivered with a p99 within
/// 3× of the same 100 on an idle pool (two real workers). In submit order alone they would wait
/// for A's whole backlog — seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_backlog_does_not_starve_another() {
    let _heavy = HEAVY.lock().await;
    let rx = receiver(true).await;
    let env = Env::new("fair", &config(&rx.url(), "key", "")).await;
    let workers: Vec<_> = (0..2)
        .map(|i| env.worker(&format!("f{i}"), &[], "10s"))
        .collect();
    // Warm up: both workers connected and waiting, the receiver's connections open.
    let _ = hundred_paced(&env, &rx, "tenant-b", "warm").await;
    let idle = hundred_paced(&env, &rx, "tenant-b", "idle").await;

    // A's backlog, written directly (the intake is not the test), then B again once A's drain
    // is under way.
    sqlx::query(
        "WITH i AS (INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, \
         request_hash, payload) SELECT 'tenant-a', 'a-' || g, 'create_invoice', repeat('0', 64), \
         jsonb_build_object('n', g, 'faults', jsonb_build_array('slow:' || $1)) \
         FROM generate_series(1, 20000) g RETURNING id, tenant_id) \
         INSERT INTO oncebox.outbox (intent_id, phase, tenant_id) \
         SELECT id, 'deliver', tenant_id FROM i",
    )
    .bind(RECEIVER_MS.to_string())
    .execute(&env.pool)
    .await
    .expect("backlog");
    let backlog_at = Instant::now();
    env.wait_until(Duration::from_secs(60), "A's drain started", || async {
        rx.total_effects() >= 2_200
    })
    .await;
    let loaded = hundred_paced(&env, &rx, "tenant-b", "loaded").await;
    let a_done = rx.effects().keys().filter(|k| k.starts_with("a-")).count();
    let elapsed = backlog_at.elapsed();
    for w in workers {
        w.stop().await;
    }

    let p = |v: &[Duration], q: f64| v[((v.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    let (idle_p50, idle_p99) = (p(&idle, 0.5), p(&idle, 0.99));
    let (load_p50, load_p99) = (p(&loaded, 0.5), p(&loaded, 0.99));
    println!(
        "fairness: B idle p50 {:.1} ms p99 {:.1} ms; B beside A's backlog p50 {:.1} ms p99 {:.1} ms \
         ({:.2}x); A delivered {a_done} of 20000 in {:.1} s meanwhile",
        ms(idle_p50),
        ms(idle_p99),
        ms(load_p50),
        ms(load_p99),
        ms(load_p99) / ms(idle_p99),
        elapsed.as_secs_f64()
    );
    assert!(
        a_done < 20_000,
        "A's backlog was still draining while B's intents went through"
    );
    assert!(
        load_p99 <= idle_p99 * 3,
        "B's p99 beside A's backlog {:.1} ms is over 3x its idle p99 {:.1} ms",
        ms(load_p99),
        ms(idle_p99)
    );
    env.drop_db().await;
}
