//! Fairness between tenants: a tenant with a large backlog does not starve another.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use oncebox_core::{IntentNames, NewIntent};
use oncebox_receiver::Receiver;
use serde_json::json;

use crate::env::*;
use crate::support::heavy;

/// Every request takes the receiver this long, as a real payment or billing API takes time: the
/// pool is busy waiting on the network, not on the CPU. It also bounds how fast the backlog can
/// drain (two workers × 32 calls / 20 ms), whatever the machine.
const RECEIVER_MS: u64 = 20;

/// How B's intent fared: how many of A's requests the receiver saw between B's commit and B's own
/// arrival, and how long that took (for the log only).
struct Waited {
    overtaken_by_a: usize,
    latency: Duration,
}

/// Submits 100 intents of `tenant`, one every 10 ms, and returns, for each, what arrived at the
/// receiver from tenant A between its commit and its own first arrival.
async fn hundred_paced(env: &Env, rx: &Receiver, tenant: &str, prefix: &str) -> Vec<Waited> {
    // Per key: the receiver's request count and the time right after the commit.
    let mut committed: HashMap<String, (usize, Instant)> = HashMap::new();
    for i in 0..100 {
        let key = format!("{prefix}-{i}");
        env.submit(NewIntent::new(
            IntentNames {
                tenant_id: tenant,
                idempotency_key: &key,
                action: "create_invoice",
            },
            json!({"n": i, "faults": [format!("slow:{RECEIVER_MS}")]}),
        ))
        .await;
        committed.insert(
            oncebox_core::delivery_key(tenant, &key),
            (rx.seen().len(), Instant::now()),
        );
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
    let seen = rx.seen();
    committed
        .iter()
        .map(|(key, (from, at))| {
            // Its first arrival (a re-send after a timeout arrives again later).
            let (arrived, first) = seen
                .iter()
                .enumerate()
                .find(|(_, s)| &s.key == key)
                .expect("arrived");
            Waited {
                overtaken_by_a: seen[*from.min(&arrived)..arrived]
                    .iter()
                    .filter(|s| s.key.starts_with("tenant-a:a-"))
                    .count(),
                latency: first.at.saturating_duration_since(*at),
            }
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Tenant A has a backlog of 20,000; each of tenant B's 100 new intents is delivered after at
/// most a claim round of A's (counted at the receiver: A's requests that arrive between B's
/// commit and B's arrival), not after A's backlog. In submit order alone each would wait for
/// thousands of A's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_backlog_does_not_starve_another() {
    let _heavy = heavy().await;
    let rx = receiver(true).await;
    let env = Env::new("fair", &config(&rx.url(), "key", "")).await;
    let workers: Vec<_> = (0..2)
        .map(|i| env.worker(&format!("f{i}"), &[], "10s"))
        .collect();
    // Warm up: both workers connected and waiting, the receiver's connections open.
    let _ = hundred_paced(&env, &rx, "tenant-b", "warm").await;

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
    env.wait_until(Duration::from_secs(60), "A's drain started", || async {
        rx.total_effects() >= 2_200
    })
    .await;
    let loaded = hundred_paced(&env, &rx, "tenant-b", "loaded").await;
    let a_done = rx
        .effects()
        .keys()
        .filter(|k| k.starts_with("tenant-a:a-"))
        .count();
    for w in workers {
        w.stop().await;
    }

    let mut overtaken: Vec<usize> = loaded.iter().map(|w| w.overtaken_by_a).collect();
    overtaken.sort_unstable();
    let mut latencies: Vec<Duration> = loaded.iter().map(|w| w.latency).collect();
    latencies.sort();
    println!(
        "fairness: each of B's 100 intents overtaken by at most {} of A's requests (median {}); \
         B's latency p50 {:.1} ms, max {:.1} ms; A delivered {a_done} of 20000 meanwhile",
        overtaken[99],
        overtaken[50],
        ms(latencies[50]),
        ms(latencies[99]),
    );
    assert!(
        a_done < 20_000,
        "A's backlog was still draining while B's intents went through"
    );
    // A claim round of two workers at 32 calls each, and the calls of the batch B's row came in,
    // with room to spare; submit order would make it thousands.
    let bound = 4 * 2 * 32;
    assert!(
        overtaken[99] <= bound,
        "one of B's intents waited behind {} of A's requests (at most {bound}): {overtaken:?}",
        overtaken[99]
    );
    env.drop_db().await;
}

/// The worker keeps its claim's tenant cursor from one claim to the next: with ten tenants of
/// fifty intents each and a batch of two, its claims go round all ten tenants before any gets a
/// second turn. A worker that started every claim from the first tenant would deliver the first
/// two tenants' hundred intents before the third tenant's first.
#[tokio::test]
async fn the_worker_goes_round_the_tenants_claim_after_claim() {
    const TENANTS: usize = 10;
    let rx = receiver(true).await;
    let env = Env::new("cursor", &config(&rx.url(), "key", "")).await;
    let mut tx = env.pool.begin().await.expect("begin");
    for i in 0..50 {
        for t in 0..TENANTS {
            env.intake
                .submit(
                    &mut tx,
                    NewIntent::new(
                        IntentNames {
                            tenant_id: &format!("t{t}"),
                            idempotency_key: &format!("k-{i}"),
                            action: "create_invoice",
                        },
                        json!({"n": i}),
                    ),
                )
                .await
                .expect("submit");
        }
    }
    tx.commit().await.expect("commit");
    let worker = env.worker_with("w", &[], "10s", &["--batch", "2", "--concurrency", "2"]);
    env.wait_until(
        Duration::from_secs(60),
        "every intent delivered",
        || async { env.open().await == 0 },
    )
    .await;
    assert!(worker.stop().await.success());
    let order: Vec<String> = rx
        .seen()
        .into_iter()
        .map(|s| s.key.split(':').next().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(order.len(), 50 * TENANTS);
    // Every tenant within the first rounds: ten tenants, two a claim, and the claims a worker
    // has in flight at once.
    let first: std::collections::HashSet<&String> = order.iter().take(4 * TENANTS).collect();
    assert_eq!(
        first.len(),
        TENANTS,
        "the first {} deliveries reached only {first:?}",
        4 * TENANTS
    );
    env.drop_db().await;
}
