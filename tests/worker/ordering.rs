//! Per-key ordering lanes end to end: real workers SIGKILLed while the receiver answers 503s and
//! drops answers, every request counted at a receiver that executes each one; a failed head
//! blocking its lane until an operator skips it; the workers' repair sweep moving a lane on.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use oncebox_core::{IntentNames, NewIntent};
use oncebox_receiver::{Fault, Receiver, Seen};
use serde_json::{Value, json};

use crate::env::*;
use crate::support::{Proc, free_addr, heavy};

const LANES: usize = 50;
const PER_LANE: usize = 40;

/// An intent of lane `lane`, number `n` within it. Its first request takes the receiver 20 ms
/// (two sends of one lane at once would overlap there); every seventh is answered 503
/// (Retry-After 1 s) first, and every tenth has its first answer dropped after executing (an
/// unknown outcome: re-sent with its key).
fn lane_intent(lane: usize, n: usize) -> NewIntent {
    let i = lane * PER_LANE + n;
    let faults = match i % 70 {
        k if k % 7 == 3 => json!(["503:1", "slow:20"]),
        k if k % 10 == 5 => json!(["drop", "slow:20"]),
        _ => json!(["slow:20"]),
    };
    NewIntent {
        ordering_key: Some(format!("account-{lane}")),
        ..NewIntent::new(
            IntentNames {
                tenant_id: "t1",
                idempotency_key: &format!("lane{lane}-{n}"),
                action: "create_invoice",
            },
            json!({"lane": lane, "n": n, "faults": faults}),
        )
    }
}

/// Per lane, the requests the receiver saw, in arrival order.
fn requests_per_lane(rx: &Receiver) -> BTreeMap<u64, Vec<Seen>> {
    let mut lanes: BTreeMap<u64, Vec<Seen>> = BTreeMap::new();
    for seen in rx.seen() {
        if let Some(lane) = seen.body.get("lane").and_then(Value::as_u64) {
            lanes.entry(lane).or_default().push(seen);
        }
    }
    lanes
}

fn number(seen: &Seen) -> u64 {
    seen.body.get("n").and_then(Value::as_u64).expect("n")
}

/// 50 lanes × 40 intents, submitted interleaved, delivered by three workers of which one is
/// SIGKILLed (and replaced) every 1.5 s, while the receiver answers 503 and drops answers. At a
/// receiver that executes every request: within a lane no request starts before the one before
/// it has ended, each request goes strictly after the one before it in (number, attempt) order —
/// a re-send of a killed worker's row repeats it, at most once per row such a worker held — and
/// the re-sends are no more than the 503s, the dropped answers and those rows explain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_arrive_in_order_through_worker_kills_and_503s() {
    let _heavy = heavy().await;
    let rx = receiver(false).await;
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
    // Rows a killed worker held when it died: each may be sent once more; nothing else may.
    let mut held_by_killed = 0;
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
            held_by_killed += env.held_by(&ids[victim]).await;
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
    let seen = rx.seen();
    let effects = rx.effects();
    assert_eq!(effects.len(), total, "every intent reached the receiver");
    // Re-sends explained: a 503 (not executed), a dropped answer (executed, unknown), a row a
    // killed worker held.
    let refused = seen
        .iter()
        .filter(|s| matches!(s.fault, Fault::RetryAfter(..)))
        .count();
    let dropped = seen.iter().filter(|s| s.fault == Fault::Drop).count();
    assert!(
        seen.len() as i64 <= (total + refused + dropped) as i64 + held_by_killed,
        "{} requests for {total} intents: only {refused} 503s, {dropped} dropped answers and \
         {held_by_killed} rows held by killed workers explain re-sends",
        seen.len()
    );

    let lanes = requests_per_lane(&rx);
    assert_eq!(lanes.len(), LANES);
    let mut repeated = 0;
    for (lane, requests) in &lanes {
        for pair in requests.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            let ended = before.ended.expect("answered or closed");
            assert!(
                after.at >= ended,
                "lane {lane}: number {} arrived while number {} was still at the receiver: \
                 two sends of one lane at once",
                number(after),
                number(before)
            );
            let order = (number(after), after.attempt).cmp(&(number(before), before.attempt));
            match order {
                std::cmp::Ordering::Greater => {}
                std::cmp::Ordering::Equal => repeated += 1,
                std::cmp::Ordering::Less => panic!(
                    "lane {lane} went back: number {} attempt {:?} after number {} attempt {:?}",
                    number(after),
                    after.attempt,
                    number(before),
                    before.attempt
                ),
            }
        }
        let mut numbers: Vec<u64> = requests.iter().map(number).collect();
        numbers.dedup();
        assert_eq!(
            numbers,
            (0..PER_LANE as u64).collect::<Vec<_>>(),
            "lane {lane}"
        );
    }
    assert!(
        repeated as i64 <= held_by_killed,
        "{repeated} requests repeated the one before them in their lane; only the \
         {held_by_killed} rows killed workers held may be sent twice"
    );
    let idle: i64 = env
        .count("SELECT count(*) FROM oncebox.lanes WHERE head_seq > last_seq")
        .await;
    assert_eq!(idle, LANES as i64, "every lane ends idle");
    assert!(kills >= 3, "workers were killed ({kills})");
    assert!(
        refused > 0 && dropped > 0,
        "503s and dropped answers made re-sends"
    );
    println!(
        "ordering: {LANES} lanes x {PER_LANE} in order in {:.1} s, {kills} workers killed \
         holding {held_by_killed} rows, {} requests ({refused} answered 503, {dropped} dropped, \
         {repeated} repeats of a killed worker's send)",
        elapsed.as_secs_f64(),
        seen.len()
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
            IntentNames {
                tenant_id: "t1",
                idempotency_key: key,
                action: "create_invoice",
            },
            json!({"k": key, "faults": faults}),
        )
    };
    env.submit(ordered("a-1", "A", json!(["422"]))).await;
    env.submit(ordered("a-2", "A", json!([]))).await;
    env.submit(ordered("b-1", "B", json!([]))).await;
    env.submit(ordered("b-2", "B", json!([]))).await;
    env.intent("free", json!({})).await;
    let metrics = free_addr();
    let worker = env.worker_with("w1", &[], "3s", &["--metrics-addr", &metrics]);
    env.wait_status("a-1", "failed").await;
    env.wait_status("b-2", "succeeded").await;
    env.wait_status("free", "succeeded").await;
    // a-2 stays parked behind its failed head, out of every claim's reach.
    let parked: String = env
        .scalar(
            "SELECT o.available_at::text FROM oncebox.outbox o JOIN oncebox.intents i \
             ON i.id = o.intent_id WHERE i.idempotency_key = 'a-2'",
        )
        .await;
    assert_eq!(parked, "infinity");
    assert_eq!(env.status_of("a-2").await, "pending");
    assert!(!rx.effects().contains_key(&dk("a-2")), "a-2 was never sent");
    // The running worker's gauge counts the blocked lane.
    let blocked = || async { metric(&scrape(&metrics).await, "oncebox_lanes_blocked") };
    env.wait_until(
        Duration::from_secs(30),
        "the blocked-lanes gauge at 1",
        || async { blocked().await == Some(1.0) },
    )
    .await;

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
    env.wait_until(
        Duration::from_secs(30),
        "the blocked-lanes gauge at 0",
        || async { blocked().await == Some(0.0) },
    )
    .await;
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

/// A lane whose head number was left without an intent (a replay racing the first submit of its
/// key can leave one) would hold its next intent for ever; a running worker's periodic repair
/// sweep moves it on, and the intent is delivered.
#[tokio::test]
async fn a_running_worker_repairs_a_lane_left_waiting_on_an_empty_number() {
    let rx = receiver(false).await;
    let env = Env::new("lane_repair", &config(&rx.url(), "key", "")).await;
    let ordered = |key: &str| NewIntent {
        ordering_key: Some("A".into()),
        ..NewIntent::new(
            IntentNames {
                tenant_id: "t1",
                idempotency_key: key,
                action: "create_invoice",
            },
            json!({"k": key}),
        )
    };
    env.submit(ordered("a-1")).await;
    let worker = env.worker("w1", &[], "3s");
    env.wait_status("a-1", "succeeded").await;
    // An empty number, made by hand, then an intent behind it: parked on a head that will never
    // come.
    sqlx::query("UPDATE oncebox.lanes SET last_seq = last_seq + 1")
        .execute(&env.pool)
        .await
        .expect("an empty number");
    env.submit(ordered("a-3")).await;
    let parked: String = env
        .scalar("SELECT available_at::text FROM oncebox.outbox")
        .await;
    assert_eq!(parked, "infinity", "a-3 waits behind the empty number");
    env.wait_status("a-3", "succeeded").await;
    assert!(worker.stop().await.success());
    assert_eq!(rx.effects().get(&dk("a-3")), Some(&1));
    env.drop_db().await;
}
