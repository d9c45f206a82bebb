//! Crashes: worker processes SIGKILLed or aborted at named points, and SIGTERM releasing
//! unfinished work — never a second effect.

use std::process::Command;
use std::time::{Duration, Instant};

use oncebox_receiver::{Fault, Receiver, ReceiverConfig};
use serde_json::json;

use crate::env::*;
use crate::support::{Proc, heavy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_storm_ends_with_exactly_one_effect_per_intent() {
    let _heavy = heavy().await;
    const N: usize = 2_000;
    let rx = Receiver::start(ReceiverConfig {
        honours_keys: true,
        drop_rate: 0.10,
        seed: 42,
        lookup_token: None,
        keep_no_bodies: false,
        keep_no_history: false,
    })
    .await
    .expect("receiver");
    let env = Env::new(
        "storm",
        &config(
            &rx.url(),
            "key",
            "[destinations.billing.retry]\nmax_attempts = 30\ninitial_delay = \"50ms\"\nmax_delay = \"500ms\"",
        ),
    )
    .await;
    for i in 0..N {
        env.intent(format!("storm-{i}"), json!({"n": i})).await;
    }
    let mut ids: Vec<String> = (0..4).map(|w| format!("w{w}")).collect();
    let mut workers: Vec<Proc> = ids.iter().map(|id| env.worker(id, &[], "3s")).collect();
    let mut kills = 0;
    // Rows a killed worker held when it died: in flight, or answered and not yet recorded. Each
    // may be sent once more by the worker that takes it over; nothing else may.
    let mut held_by_killed = 0;
    let start = Instant::now();
    loop {
        let open = env.open().await;
        if open == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "{open} intents still open after 180 s"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Kill one worker (SIGKILL: no clean-up at all) and start a replacement.
        let victim = kills % workers.len();
        workers[victim].kill().await;
        held_by_killed += env.held_by(&ids[victim]).await;
        ids[victim] = format!("w{victim}-{kills}");
        workers[victim] = env.worker(&ids[victim], &[], "3s");
        kills += 1;
    }
    for w in workers {
        w.stop().await;
    }
    let effects = rx.effects();
    assert_eq!(effects.len(), N, "every intent reached the receiver");
    let dup: Vec<_> = effects.iter().filter(|(_, n)| **n != 1).collect();
    assert!(dup.is_empty(), "duplicate effects: {dup:?}");
    assert_eq!(
        env.status_counts().await.get("succeeded"),
        Some(&(N as i64))
    );
    let (attempt_rows, unknown_rows): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE outcome = 'unknown') FROM oncebox.attempts",
    )
    .fetch_one(&env.pool)
    .await
    .expect("attempts");
    let seen = rx.seen();
    let requests = seen.len();
    let dropped = seen.iter().filter(|s| s.fault == Fault::Drop).count();
    println!(
        "storm: {N} intents, {kills} workers killed holding {held_by_killed} rows, {requests} requests ({dropped} answers dropped), {attempt_rows} attempt rows ({unknown_rows} unknown)"
    );
    assert!(kills >= 3, "the storm killed workers");
    assert!(
        unknown_rows > 0,
        "dropped answers show in the retry report as unknown, then retried"
    );
    assert!(requests > N, "retries happened");
    // The receiver honours keys, so a second send of one row shows as a replay, not an effect:
    // count the sends. Each dropped answer explains one re-send, each row a killed worker held
    // one more; two workers sending the same row would exceed this.
    assert!(
        requests as i64 <= N as i64 + dropped as i64 + held_by_killed,
        "{requests} requests for {N} intents: only {dropped} dropped answers and {held_by_killed} rows held by killed workers explain re-sends"
    );
    env.drop_db().await;
}

#[tokio::test]
async fn killed_after_dispatch_at_a_non_key_receiver_becomes_unknown_without_a_second_effect() {
    let rx = receiver(false).await;
    let env = Env::new("after_call", &lookup_config(&rx.url())).await;
    env.intent("dispatched-1", json!({"n": 1})).await;
    let mut crashing = env.worker("crasher", &[("ONCEBOX_CRASH_AT", "after_call")], "3s");
    let status = crashing.exited().await;
    assert!(!status.success(), "the worker aborted at the crash point");
    assert_eq!(
        rx.effects().get(&dk("dispatched-1")),
        Some(&1),
        "the receiver executed once"
    );
    assert_eq!(env.status_of("dispatched-1").await, "in_flight");

    let survivor = env.worker("survivor", &[], "3s");
    env.wait_status("dispatched-1", "unknown").await;
    let phase: String = env.scalar("SELECT phase::text FROM oncebox.outbox WHERE intent_id = (SELECT id FROM oncebox.intents WHERE idempotency_key = 'dispatched-1')").await;
    assert_eq!(phase, "reconcile", "a reconciliation is queued");
    // The reconciler is already at work: its lookups (a closed port in this config) fail and are
    // retried, but nothing is ever re-sent.
    let r = reports(&env, "dispatched-1").await;
    assert_eq!(
        r.first().map(String::as_str),
        Some("previous_outcome_unknown"),
        "{r:?}"
    );
    assert!(r[1..].iter().all(|o| o == "lookup_failed"), "{r:?}");
    assert!(
        survivor.stop().await.success(),
        "SIGTERM ends the worker with exit 0"
    );
    assert_eq!(
        rx.effects().get(&dk("dispatched-1")),
        Some(&1),
        "no blind re-send"
    );
    assert_eq!(rx.seen().len(), 1);
    env.drop_db().await;
}

#[tokio::test]
async fn killed_before_dispatch_another_worker_delivers_once_after_the_lease() {
    let rx = receiver(false).await;
    let env = Env::new("after_claim", &lookup_config(&rx.url())).await;
    env.intent("claimed-1", json!({"n": 1})).await;
    let mut crashing = env.worker("crasher", &[("ONCEBOX_CRASH_AT", "after_claim")], "3s");
    assert!(!crashing.exited().await.success());
    let owner: Option<String> = env.scalar("SELECT lease_owner FROM oncebox.outbox").await;
    assert_eq!(
        owner.as_deref(),
        Some("crasher"),
        "the dead worker still holds the lease"
    );
    assert!(rx.seen().is_empty(), "nothing was sent");

    let taken_at = Instant::now();
    let survivor = env.worker("survivor", &[], "3s");
    env.wait_status("claimed-1", "succeeded").await;
    assert!(
        taken_at.elapsed() >= Duration::from_secs(2),
        "taken over only after the lease expired"
    );
    assert!(survivor.stop().await.success());
    assert_eq!(rx.effects().get(&dk("claimed-1")), Some(&1));
    assert_eq!(rx.seen().len(), 1, "delivered once");
    let epoch_attempts: (i64, i32) = sqlx::query_as("SELECT epoch, attempt FROM oncebox.attempts")
        .fetch_one(&env.pool)
        .await
        .expect("one attempt row");
    assert_eq!(
        epoch_attempts,
        (2, 1),
        "second lease (epoch 2), first attempt"
    );
    env.drop_db().await;
}

#[tokio::test]
async fn sigterm_releases_unfinished_work_within_the_grace_period() {
    let rx = receiver(true).await;
    // A slow receiver: the call outlives the worker's 2 s grace period.
    let env = Env::new(
        "release",
        &config(&rx.url(), "key", "").replace("timeout = \"1s\"", "timeout = \"8s\""),
    )
    .await;
    env.intent("slow", json!({"faults": ["slow:6000"]})).await;
    let mut worker = env.worker("w1", &[], "20s");
    env.wait_until(Duration::from_secs(10), "the call to start", || async {
        !rx.seen().is_empty()
    })
    .await;
    let asked = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status();
    let status = worker.exited().await;
    assert!(status.success(), "exit 0 after SIGTERM, got {status:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "stopped within the grace period, took {:?}",
        asked.elapsed()
    );
    // Released, not left to run out: the lease ends now. Its holder is kept, as a crashed
    // worker's is — the call may have been sent, so the intent must not look cancellable.
    let released: Option<bool> = env
        .scalar("SELECT lease_expires_at <= now() AND lease_owner = 'w1' FROM oncebox.outbox")
        .await;
    assert_eq!(
        released,
        Some(true),
        "the lease was released, its holder kept"
    );
    // The next worker picks it up at once (not after the 20 s lease) and the key prevents a
    // second effect.
    let next = env.worker("w2", &[], "20s");
    env.wait_status("slow", "succeeded").await;
    assert!(next.stop().await.success());
    assert_eq!(rx.effects().get(&dk("slow")), Some(&1));
    env.drop_db().await;
}
