//! Per-key ordering lanes end to end: real workers SIGKILLed while the receiver answers 503s,
//! lanes counted at the receiver; a failed head blocking its lane until an operator skips it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use oncebox_core::NewIntent;
use oncebox_receiver::Receiver;
use serde_json::{Value, json};

use crate::env::*;
use crate::support::Proc;

const LANES: usize = 50;
const PER_LANE: usize = 40;

/// An intent of lane `lane`, number `n` within it; every seventh answers 503 (Retry-After 1 s)
/// first, and every tenth drops its first answer after executing (an unknown outcome: re-sent
/// with its key).
fn lane_intent(lane: usize, n: usize) -> NewIntent {
    let i = lane * PER_LANE + n;
    let faults = match i % 70 {
        k if k % 7 == 3 => json!(["503:1", "ok"]),
        k if k % 10 == 5 => json!(["drop", "ok"]),
        _ => json!([]),
    };
    NewIntent {
        ordering_key: Some(format!("account-{lane}")),
        ..NewIntent::new(
            "t1",
            format!("lane{lane}-{n}"),
            "create_invoice",
            json!({"lane": lane, "n": n, "faults": faults}),
        )
    }
}

/// Per lane, the numbers of the requests the receiver saw, in arrival order.
fn requests_per_lane(rx: &Receiver) -> BTreeMap<u64, Vec<u64>> {
    let mut lanes: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for seen in rx.seen() {
        let (Some(lane), Some(n)) = (
            seen.body.get("lane").and_then(Value::as_u64),
            seen.body.get("n").and_then(Value::as_u64),
        ) else {
            continue;
        };
        lanes.entry(lane).or_default().push(n);
    }
    lanes
}

/// 50 lanes × 40 intents, submitted interleaved, delivered by three workers of which one is
/// SIGKILLed (and replaced) every 1.5 s, while the receiver answers 503 and drops answers. Every
/// lane arrives in submit order: once the receiver has seen a lane's intent n + 1 it never sees n
/// again (n was terminal before n + 1 started), and each key has exactly one effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_arrive_in_order_through_worker_kills_and_503s() {
    let _heavy = HEAVY.lock().await;
    let rx = receiver(true).await;
    let env = Env::new(
        "lanes",
        &config(
            &rx.url(),
            "key",
            "[destinations.billing.retry]\nmax_attempts = 30\ninitial_delay = \"50ms\"\nmax_delay = \"1s\"",
        ),
    )
    .await;
    // Interleaved: each transaction holds one intent of every lane.
    for n in 0..PER_LANE {
        let mut tx = env.pool.begin().await.expect("begin");
        for lane in 0..LANES {
            env.intake
                .submit(&mut tx, lane_intent(lane, n))
                .await
                .expect("submit");
        }
        tx.commit().await.expect("commit");
    }
    // Unordered intents beside them are not held by any lane.
    for i in 0..100 {
        env.intent(format!("free-{i}"), json!({"free": i})).await;
    }
    let ready: i64 = env
        .count("SELECT count(*) FROM oncebox.outbox WHERE available_at <= now()")
        .await;
    assert_eq!(
        ready,
        (LANES + 100) as i64,
        "only each lane's head is ready"
    );

    let mut ids: Vec<String> = (0..3).map(|w| format!("w{w}")).collect();
    let mut workers: Vec<Proc> = ids.iter().map(|id| env.worker(id, &[], "3s")).collect();
    let mut kills = 0;
    let start = Instant::now();
    let mut last_kill = Instant::now();
    loop {
        if env.open().await == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "{} intents still open after 240 s",
            env.open().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        if last_kill.elapsed() >= Duration::from_millis(1500) {
            let victim = kills % workers.len();
            workers[victim].kill().await;
            ids[victim] = format!("w{victim}-{kills}");
            workers[victim] = env.worker(&ids[victim], &[], "3s");
            kills += 1;
            last_kill = Instant::now();
        }
    }
    let elapsed = start.elapsed();
    for w in workers {
        w.stop().await;
    }

    let total = LANES * PER_LANE + 100;
    assert_eq!(
        env.status_counts().await.get("succeeded"),
        Some(&(total as i64))
    );
    let effects = rx.effects();
    assert_eq!(effects.len(), total, "every intent reached the receiver");
    let dup: Vec<_> = effects.iter().filter(|(_, n)| **n != 1).collect();
    assert!(dup.is_empty(), "duplicate effects: {dup:?}");
    let lanes = requests_per_lane(&rx);
    assert_eq!(lanes.len(), LANES);
    let mut resent = 0;
    for (lane, ns) in &lanes {
        assert!(
            ns.windows(2).all(|w| w[0] <= w[1]),
            "lane {lane} went back to an earlier intent after a later one started: {ns:?}"
        );
        let mut distinct = ns.clone();
        distinct.dedup();
        assert_eq!(
            distinct,
            (0..PER_LANE as u64).collect::<Vec<_>>(),
            "lane {lane}"
        );
        resent += ns.len() - distinct.len();
    }
    let idle: i64 = env
        .count("SELECT count(*) FROM oncebox.lanes WHERE head_seq > last_seq")
        .await;
    assert_eq!(idle, LANES as i64, "every lane ends idle");
    assert!(kills >= 3, "workers were killed ({kills})");
    assert!(resent > 0, "503s and dropped answers made re-sends");
    println!(
        "ordering: {LANES} lanes x {PER_LANE} in order in {:.1} s, {kills} workers killed, \
         {resent} re-sends within lanes",
        elapsed.as_secs_f64()
    );
    env.drop_db().await;
}

/// A head that fails for good blocks its lane — the next intent is never sent — and shows in
/// `oncebox ops lanes list --blocked`; `oncebox ops lanes skip` lets the lane go on. Another lane
/// and unordered intents are not held meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_head_blocks_its_lane_until_an_operator_skips_it() {
    let rx = receiver(false).await;
    let env = Env::new("lane_block", &config(&rx.url(), "key", "")).await;
    let ordered = |key: &str, lane: &str, faults: Value| NewIntent {
        ordering_key: Some(lane.into()),
        ..NewIntent::new(
            "t1",
            key,
            "create_invoice",
            json!({"k": key, "faults": faults}),
        )
    };
    env.submit(ordered("a-1", "A", json!(["422"]))).await;
    env.submit(ordered("a-2", "A", json!([]))).await;
    env.submit(ordered("b-1", "B", json!([]))).await;
    env.submit(ordered("b-2", "B", json!([]))).await;
    env.intent("free", json!({})).await;
    let worker = env.worker("w1", &[], "3s");
    env.wait_status("a-1", "failed").await;
    env.wait_status("b-2", "succeeded").await;
    env.wait_status("free", "succeeded").await;
    // The worker keeps claiming; a-2 stays parked behind its failed head.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.status_of("a-2").await, "pending");
    assert!(!rx.effects().contains_key("a-2"), "a-2 was never sent");

    let (code, listed, _) = ops(&env, &["lanes", "list", "--blocked"]);
    assert_eq!(code, 0);
    let listed = listed.as_array().expect("lanes");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["ordering_key"], "A");
    assert_eq!(listed[0]["head_key"], "a-1");
    assert_eq!(listed[0]["head_status"], "failed");
    assert_eq!(listed[0]["queued"], 2);
    assert_eq!(listed[0]["blocked"], true);

    // Only a blocking head can be skipped.
    let (code, _, err) = ops(&env, &["lanes", "skip", "a-2", "--reason", "x"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("only a head that ended failed"), "{err}");
    let (code, _, err) = ops(&env, &["lanes", "skip", "a-1", "--reason", " "]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("reason"), "{err}");

    let (code, _, err) = ops(
        &env,
        &["lanes", "skip", "a-1", "--reason", "invoice voided by hand"],
    );
    assert_eq!(code, 0, "{err}");
    env.wait_status("a-2", "succeeded").await;
    assert_eq!(
        env.status_of("a-1").await,
        "failed",
        "skipping changes nothing else"
    );
    let (code, listed, _) = ops(&env, &["lanes", "list"]);
    assert_eq!(code, 0);
    assert_eq!(listed, json!([]), "no lane has work left");
    let audit: (String, String) = sqlx::query_as(
        "SELECT a.action, a.reason FROM oncebox.audit a JOIN oncebox.intents i ON i.id = a.intent_id \
         WHERE i.idempotency_key = 'a-1'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("audit row");
    assert_eq!(audit, ("skip".into(), "invoice voided by hand".into()));
    let (code, _, err) = ops(&env, &["lanes", "skip", "a-1", "--reason", "again"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not its lane's head"), "{err}");
    worker.stop().await;
    env.drop_db().await;
}
