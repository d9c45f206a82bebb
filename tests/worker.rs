//! The delivery workers end to end: real `oncebox worker` processes, a real receiver, the real
//! Postgres; crashes are real SIGKILLs or aborts at named points. Effects are counted at the
//! receiver.

mod common;
use common::free_addr;

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use oncebox_core::NewIntent;
use oncebox_core::config::Config;
use oncebox_receiver::{Receiver, ReceiverConfig};
use oncebox_store::Intake;
use serde_json::{Value, json};
use sqlx::{PgPool, Row};
use tokio_util::sync::CancellationToken;

const BIN: &str = env!("CARGO_BIN_EXE_oncebox");

/// A database and a config file of one test's own.
struct Env {
    name: String,
    url: String,
    config: PathBuf,
    pool: PgPool,
    intake: Intake,
}

impl Env {
    async fn new(test: &str, config: &str) -> Env {
        let name = format!("oncebox_w_{test}_{}", std::process::id());
        let url = common::create_db(&name).await;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .connect(&url)
            .await
            .expect("pool");
        oncebox_store::migrate(&pool).await.expect("migrate");
        let path = std::env::temp_dir().join(format!("{name}.toml"));
        std::fs::write(&path, config).expect("config file");
        let intake = Intake::new(&Config::from_toml(config).expect("valid config"));
        Env {
            name,
            url,
            config: path,
            pool,
            intake,
        }
    }

    async fn submit(&self, intent: NewIntent) {
        let mut tx = self.pool.begin().await.expect("begin");
        self.intake.submit(&mut tx, intent).await.expect("submit");
        tx.commit().await.expect("commit");
    }

    fn worker(&self, id: &str, extra_env: &[(&str, &str)], lease: &str) -> Child {
        self.worker_with(id, extra_env, lease, &[])
    }

    fn worker_with(
        &self,
        id: &str,
        extra_env: &[(&str, &str)],
        lease: &str,
        args: &[&str],
    ) -> Child {
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--config"])
            .arg(&self.config)
            .args([
                "--id",
                id,
                "--lease",
                lease,
                "--poll-interval",
                "100ms",
                "--grace",
                "2s",
                "--concurrency",
                "32",
            ])
            .args(args)
            .env("DATABASE_URL", &self.url)
            .env("ONCEBOX_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("spawn worker")
    }

    async fn status_counts(&self) -> HashMap<String, i64> {
        sqlx::query("SELECT status, count(*) AS n FROM oncebox.intents GROUP BY status")
            .fetch_all(&self.pool)
            .await
            .expect("counts")
            .into_iter()
            .map(|r| (r.get("status"), r.get("n")))
            .collect()
    }

    async fn status_of(&self, key: &str) -> String {
        sqlx::query_scalar("SELECT status FROM oncebox.intents WHERE idempotency_key = $1")
            .bind(key)
            .fetch_one(&self.pool)
            .await
            .expect("status")
    }

    /// Waits until `done` holds, checking every 100 ms, for at most `limit`.
    async fn wait_until<F, Fut>(&self, limit: Duration, what: &str, mut done: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let start = Instant::now();
        while !done().await {
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn drop_db(self) {
        self.pool.close().await;
        common::drop_db(&self.name).await;
        let _ = std::fs::remove_file(&self.config);
    }
}

/// Waits for a child without blocking the runtime (the receiver runs on it).
async fn exited(child: &mut Child) -> std::process::ExitStatus {
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// GET /metrics from a worker.
async fn scrape(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("metrics endpoint");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let mut out = String::new();
    stream.read_to_string(&mut out).await.expect("response");
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out
}

/// SIGTERM, then wait for the exit.
async fn stop(mut child: Child) -> std::process::ExitStatus {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    exited(&mut child).await
}

fn config(url: &str, idempotency: &str, extra: &str) -> String {
    format!(
        r#"
[actions.create_invoice]
destination = "billing"

[destinations.billing]
kind = "http"
url = "{url}"
idempotency = "{idempotency}"
timeout = "1s"
reference_pointer = "/id"
{extra}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_storm_ends_with_exactly_one_effect_per_intent() {
    const N: usize = 2_000;
    let rx = Receiver::start(ReceiverConfig {
        honours_keys: true,
        drop_rate: 0.10,
        seed: 42,
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
        env.submit(NewIntent::new(
            "t1",
            format!("storm-{i}"),
            "create_invoice",
            json!({"n": i}),
        ))
        .await;
    }
    let mut workers: Vec<Child> = (0..4)
        .map(|w| env.worker(&format!("w{w}"), &[], "3s"))
        .collect();
    let mut kills = 0;
    let start = Instant::now();
    loop {
        let open: i64 =
            sqlx::query_scalar("SELECT count(*) FROM oncebox.intents WHERE completed_at IS NULL")
                .fetch_one(&env.pool)
                .await
                .expect("open");
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
        workers[victim].kill().expect("SIGKILL");
        exited(&mut workers[victim]).await;
        workers[victim] = env.worker(&format!("w{victim}-{kills}"), &[], "3s");
        kills += 1;
    }
    for w in workers {
        stop(w).await;
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
    let requests = rx.seen().len();
    println!(
        "storm: {N} intents, {kills} workers killed, {requests} requests, {attempt_rows} attempt rows ({unknown_rows} unknown)"
    );
    assert!(kills >= 3, "the storm killed workers");
    assert!(
        unknown_rows > 0,
        "dropped answers show in the retry report as unknown, then retried"
    );
    assert!(requests > N, "retries happened");
    env.drop_db().await;
}

fn lookup_config(url: &str) -> String {
    config(
        url,
        "lookup",
        "[destinations.billing.lookup]\nurl = \"http://127.0.0.1:9/find?key={key}\"",
    )
}

#[tokio::test]
async fn killed_after_dispatch_at_a_non_key_receiver_becomes_unknown_without_a_second_effect() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("after_call", &lookup_config(&rx.url())).await;
    env.submit(NewIntent::new(
        "t1",
        "dispatched-1",
        "create_invoice",
        json!({"n": 1}),
    ))
    .await;
    let mut crashing = env.worker("crasher", &[("ONCEBOX_CRASH_AT", "after_call")], "3s");
    let status = exited(&mut crashing).await;
    assert!(!status.success(), "the worker aborted at the crash point");
    assert_eq!(
        rx.effects().get("dispatched-1"),
        Some(&1),
        "the receiver executed once"
    );
    assert_eq!(env.status_of("dispatched-1").await, "in_flight");

    let survivor = env.worker("survivor", &[], "3s");
    env.wait_until(Duration::from_secs(20), "status unknown", || async {
        env.status_of("dispatched-1").await == "unknown"
    })
    .await;
    let phase: String = sqlx::query_scalar("SELECT phase FROM oncebox.outbox WHERE intent_id = (SELECT id FROM oncebox.intents WHERE idempotency_key = 'dispatched-1')")
        .fetch_one(&env.pool)
        .await
        .expect("outbox row");
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
        stop(survivor).await.success(),
        "SIGTERM ends the worker with exit 0"
    );
    assert_eq!(
        rx.effects().get("dispatched-1"),
        Some(&1),
        "no blind re-send"
    );
    assert_eq!(rx.seen().len(), 1);
    env.drop_db().await;
}

#[tokio::test]
async fn killed_before_dispatch_another_worker_delivers_once_after_the_lease() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("after_claim", &lookup_config(&rx.url())).await;
    env.submit(NewIntent::new(
        "t1",
        "claimed-1",
        "create_invoice",
        json!({"n": 1}),
    ))
    .await;
    let mut crashing = env.worker("crasher", &[("ONCEBOX_CRASH_AT", "after_claim")], "3s");
    assert!(!exited(&mut crashing).await.success());
    let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM oncebox.outbox")
        .fetch_one(&env.pool)
        .await
        .expect("lease");
    assert_eq!(
        owner.as_deref(),
        Some("crasher"),
        "the dead worker still holds the lease"
    );
    assert!(rx.seen().is_empty(), "nothing was sent");

    let taken_at = Instant::now();
    let survivor = env.worker("survivor", &[], "3s");
    env.wait_until(Duration::from_secs(20), "succeeded", || async {
        env.status_of("claimed-1").await == "succeeded"
    })
    .await;
    assert!(
        taken_at.elapsed() >= Duration::from_secs(2),
        "taken over only after the lease expired"
    );
    assert!(stop(survivor).await.success());
    assert_eq!(rx.effects().get("claimed-1"), Some(&1));
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
async fn retry_after_deadline_and_exhausted_attempts() {
    let rx = Receiver::start(ReceiverConfig {
        honours_keys: true,
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver");
    let env = Env::new(
        "retries",
        &config(&rx.url(), "key", "[destinations.billing.retry]\nmax_attempts = 3\ninitial_delay = \"50ms\"\nmax_delay = \"100ms\""),
    )
    .await;
    env.submit(NewIntent::new(
        "t1",
        "retry-after",
        "create_invoice",
        json!({"faults": ["503:2", "ok"]}),
    ))
    .await;
    env.submit(NewIntent {
        deadline: Some(SystemTime::now() + Duration::from_millis(1500)),
        ..NewIntent::new(
            "t1",
            "deadline",
            "create_invoice",
            json!({"faults": ["503:5", "ok"]}),
        )
    })
    .await;
    env.submit(NewIntent::new(
        "t1",
        "exhausted",
        "create_invoice",
        json!({"faults": ["429:0", "503:0", "503:0", "ok"]}),
    ))
    .await;
    env.submit(NewIntent::new(
        "t1",
        "refused",
        "create_invoice",
        json!({"faults": ["400"]}),
    ))
    .await;
    let metrics_addr = common::free_addr();
    let worker = env.worker_with("w", &[], "5s", &["--metrics-addr", &metrics_addr]);
    env.wait_until(Duration::from_secs(30), "all terminal", || async {
        let open: i64 =
            sqlx::query_scalar("SELECT count(*) FROM oncebox.intents WHERE completed_at IS NULL")
                .fetch_one(&env.pool)
                .await
                .expect("open");
        open == 0
    })
    .await;
    let metrics = scrape(&metrics_addr).await;
    assert!(stop(worker).await.success());
    for line in [
        "oncebox_deliveries_total{destination=\"billing\",outcome=\"succeeded\"} 1",
        "oncebox_deliveries_total{destination=\"billing\",outcome=\"retry_before_execution\"} 5",
        "oncebox_deliveries_total{destination=\"billing\",outcome=\"permanent\"} 1",
        "oncebox_delivery_seconds_count{destination=\"billing\"} 7",
        "oncebox_leases_lost_total 0",
        "oncebox_ready_depth ",
        "oncebox_oldest_ready_age_seconds ",
        "oncebox_claim_batch_size_count ",
    ] {
        assert!(
            metrics.contains(line),
            "/metrics lacks {line:?}:\n{metrics}"
        );
    }

    let seen = rx.seen();
    let times = |key: &str| {
        seen.iter()
            .filter(|s| s.key == key)
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
    let error: Value = sqlx::query_scalar(
        "SELECT last_error FROM oncebox.intents WHERE idempotency_key = 'exhausted'",
    )
    .fetch_one(&env.pool)
    .await
    .expect("error");
    assert_eq!(error["status_code"], 503);

    assert_eq!(times("refused").len(), 1);
    assert_eq!(env.status_of("refused").await, "failed");
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.attempts")
        .fetch_one(&env.pool)
        .await
        .expect("n");
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
    let rx = Receiver::start(ReceiverConfig {
        honours_keys: true,
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver");
    let env = Env::new("relisten", &config(&rx.url(), "key", "")).await;
    let worker = env.worker("w", &[], "5s");
    env.submit(NewIntent::new("t1", "before", "create_invoice", json!({})))
        .await;
    env.wait_until(Duration::from_secs(20), "first delivery", || async {
        env.status_of("before").await == "succeeded"
    })
    .await;
    // Wait until the worker is idle on LISTEN (it registers as waiting), then cut its LISTEN
    // connection from the server side.
    env.wait_until(
        Duration::from_secs(10),
        "the worker to wait on LISTEN",
        || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM oncebox.waiting_workers WHERE worker = 'w'",
            )
            .fetch_one(&env.pool)
            .await
            .expect("waiting");
            n == 1
        },
    )
    .await;
    let cut: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
          WHERE datname = current_database() AND query LIKE 'LISTEN%') t",
    )
    .fetch_one(&env.pool)
    .await
    .expect("terminate");
    assert_eq!(cut, 1, "the worker had one LISTEN connection");
    for i in 0..5 {
        env.submit(NewIntent::new(
            "t1",
            format!("after-{i}"),
            "create_invoice",
            json!({}),
        ))
        .await;
    }
    env.wait_until(
        Duration::from_secs(20),
        "deliveries after the cut",
        || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM oncebox.intents WHERE status = 'succeeded'",
            )
            .fetch_one(&env.pool)
            .await
            .expect("count");
            n == 6
        },
    )
    .await;
    assert!(stop(worker).await.success());
    assert_eq!(rx.total_effects(), 6);
    env.drop_db().await;
}

#[tokio::test]
async fn sigterm_releases_unfinished_work_within_the_grace_period() {
    let rx = Receiver::start(ReceiverConfig {
        honours_keys: true,
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver");
    // A slow receiver: the call outlives the worker's 2 s grace period.
    let env = Env::new(
        "release",
        &config(&rx.url(), "key", "").replace("timeout = \"1s\"", "timeout = \"8s\""),
    )
    .await;
    env.submit(NewIntent::new(
        "t1",
        "slow",
        "create_invoice",
        json!({"faults": ["slow:6000"]}),
    ))
    .await;
    let mut worker = env.worker("w1", &[], "20s");
    env.wait_until(Duration::from_secs(10), "the call to start", || async {
        !rx.seen().is_empty()
    })
    .await;
    let asked = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status();
    let status = exited(&mut worker).await;
    assert!(status.success(), "exit 0 after SIGTERM, got {status:?}");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "stopped within the grace period, took {:?}",
        asked.elapsed()
    );
    let owner: Option<String> = sqlx::query_scalar("SELECT lease_owner FROM oncebox.outbox")
        .fetch_one(&env.pool)
        .await
        .expect("row");
    assert_eq!(owner, None, "the lease was released, not left to expire");
    // The next worker picks it up at once (not after the 20 s lease) and the key prevents a
    // second effect.
    let next = env.worker("w2", &[], "20s");
    env.wait_until(
        Duration::from_secs(10),
        "delivery by the next worker",
        || async { env.status_of("slow").await == "succeeded" },
    )
    .await;
    assert!(stop(next).await.success());
    assert_eq!(rx.effects().get("slow"), Some(&1));
    env.drop_db().await;
}

#[tokio::test]
async fn cancelled_intents_are_never_dispatched() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("cancelled", &config(&rx.url(), "key", "")).await;
    env.submit(NewIntent::new(
        "t1",
        "cancelled-1",
        "create_invoice",
        json!({}),
    ))
    .await;
    env.submit(NewIntent::new("t1", "kept-1", "create_invoice", json!({})))
        .await;
    // Cancelled while queued (the cancel command arrives with the ops issue; its write is this).
    sqlx::query(
        "UPDATE oncebox.intents SET status = 'cancelled', completed_at = '2026-01-01T00:00:00Z',
                last_error = '{\"code\": \"cancelled\", \"detail\": \"by ops\"}'
         WHERE idempotency_key = 'cancelled-1'",
    )
    .execute(&env.pool)
    .await
    .expect("cancel");
    let worker = env.worker("w", &[], "5s");
    env.wait_until(Duration::from_secs(20), "the queue to empty", || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox")
            .fetch_one(&env.pool)
            .await
            .expect("n");
        n == 0
    })
    .await;
    assert!(stop(worker).await.success());
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
        ["kept-1"],
        "the cancelled intent never reached the receiver"
    );
    env.drop_db().await;
}

fn reconcile_config(rx: &Receiver, window: &str) -> String {
    config(
        &rx.url(),
        "lookup",
        &format!(
            "consistency_window = \"{window}\"\n[destinations.billing.lookup]\nurl = \"{}?key={{key}}\"\nresults_pointer = \"/data\"\nfields = [\"/n\"]\nreference_pointer = \"/id\"\ntimeout = \"1s\"",
            rx.url()
        ),
    )
}

async fn reports(env: &Env, key: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT outcome FROM oncebox.attempts WHERE intent_id = (SELECT id FROM oncebox.intents WHERE idempotency_key = $1) ORDER BY id",
    )
    .bind(key)
    .fetch_all(&env.pool)
    .await
    .expect("reports")
}

#[tokio::test]
async fn a_dropped_answer_at_a_non_key_receiver_is_reconciled_without_a_second_effect() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("reconciled", &reconcile_config(&rx, "30s")).await;
    env.submit(NewIntent::new(
        "t1",
        "dropped",
        "create_invoice",
        json!({"n": 7, "faults": ["drop"]}),
    ))
    .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_until(Duration::from_secs(20), "reconciled", || async {
        env.status_of("dropped").await == "succeeded"
    })
    .await;
    assert!(stop(worker).await.success());
    let reference: String = sqlx::query_scalar("SELECT external_reference FROM oncebox.intents")
        .fetch_one(&env.pool)
        .await
        .expect("reference");
    assert_eq!(reference, "ref-dropped");
    assert_eq!(rx.effects().get("dropped"), Some(&1), "no second effect");
    assert_eq!(
        rx.seen().len(),
        1,
        "one POST: the answer was looked up, not re-sent"
    );
    assert_eq!(reports(&env, "dropped").await, ["unknown", "lookup_found"]);
    env.drop_db().await;
}

#[tokio::test]
async fn nothing_found_is_reissued_only_after_the_consistency_window() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("reissued", &reconcile_config(&rx, "2s")).await;
    // The first attempt never executes and never answers (timeout: unknown); the re-issue works.
    env.submit(NewIntent::new(
        "t1",
        "lost",
        "create_invoice",
        json!({"n": 1, "faults": ["hang:3000", "ok"]}),
    ))
    .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_until(
        Duration::from_secs(30),
        "succeeded after re-issue",
        || async { env.status_of("lost").await == "succeeded" },
    )
    .await;
    assert!(stop(worker).await.success());
    let posts: Vec<_> = rx
        .seen()
        .into_iter()
        .filter(|s| s.key == "lost")
        .map(|s| s.at)
        .collect();
    assert_eq!(posts.len(), 2);
    assert!(
        posts[1] - posts[0] >= Duration::from_secs(2),
        "re-issued {:?} after the first dispatch",
        posts[1] - posts[0]
    );
    assert_eq!(rx.effects().get("lost"), Some(&1), "exactly one effect");
    let r = reports(&env, "lost").await;
    assert_eq!(r.first().map(String::as_str), Some("unknown"));
    assert!(
        r.contains(&"lookup_none".to_owned()),
        "looked again inside the window: {r:?}"
    );
    assert!(r.contains(&"reissue".to_owned()), "{r:?}");
    assert_eq!(r.last().map(String::as_str), Some("succeeded"));
    env.drop_db().await;
}

/// Tests that use RabbitMQ run one at a time: one of them stops the broker.
static AMQP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// Reads every message waiting in `queue` (no ack needed: they are taken).
async fn drain_queue(queue: &str) -> Vec<(String, Value)> {
    use lapin::options::BasicGetOptions;
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    let mut out = Vec::new();
    while let Some(m) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic_get")
    {
        let id = m
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default();
        out.push((
            id,
            serde_json::from_slice(&m.delivery.data).expect("json body"),
        ));
    }
    let _ = conn.close(200, "done".into()).await;
    out
}

async fn delete_exchange(exchange: &str) {
    use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    for reason in oncebox_worker::REASONS {
        let _ = channel
            .queue_delete(
                format!("{exchange}.{reason}").as_str().into(),
                QueueDeleteOptions::default(),
            )
            .await;
    }
    let _ = channel
        .exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
        .await;
    let _ = conn.close(200, "done".into()).await;
}

async fn notify_rows(env: &Env) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox WHERE phase = 'notify'")
        .fetch_one(&env.pool)
        .await
        .expect("n")
}

#[tokio::test]
async fn two_effects_found_need_review_and_one_dead_letter_reaches_its_queue() {
    let _one_at_a_time = AMQP.lock().await;
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("ambiguous", &reconcile_config(&rx, "30s")).await;
    let exchange = format!("{}.dead-letter", env.name);
    env.submit(NewIntent::new(
        "t1",
        "twice",
        "create_invoice",
        json!({"n": 2, "faults": ["double"]}),
    ))
    .await;
    let url = amqp_url();
    let worker = env.worker_with(
        "w",
        &[],
        "5s",
        &["--amqp-url", &url, "--dead-letter-exchange", &exchange],
    );
    env.wait_until(Duration::from_secs(20), "needs_review", || async {
        env.status_of("twice").await == "needs_review"
    })
    .await;
    // The notify row is deleted only after the broker confirmed the routed message.
    env.wait_until(
        Duration::from_secs(20),
        "the dead letter to be published",
        || async { notify_rows(&env).await == 0 },
    )
    .await;
    assert!(stop(worker).await.success());
    assert_eq!(
        reports(&env, "twice").await,
        ["unknown", "lookup_ambiguous"]
    );
    let messages = drain_queue(&format!("{exchange}.needs_review")).await;
    assert_eq!(messages.len(), 1, "exactly one message: {messages:?}");
    let (id, body) = &messages[0];
    assert_eq!(id, "dlq:twice");
    assert_eq!(body["status"], "needs_review");
    assert_eq!(body["tenant"], "t1");
    assert_eq!(body["last_error"]["code"], "lookup_ambiguous");
    assert!(drain_queue(&format!("{exchange}.failed")).await.is_empty());
    let outbox: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox")
        .fetch_one(&env.pool)
        .await
        .expect("n");
    assert_eq!(outbox, 0);
    assert_eq!(rx.seen().len(), 1, "never re-sent");
    delete_exchange(&exchange).await;
    env.drop_db().await;
}

/// Starts the RabbitMQ app again when dropped, so a failing outage test never leaves the broker
/// down for the tests after it.
struct BrokerBackUp;

impl Drop for BrokerBackUp {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .arg("start_app")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn rabbitmqctl(cmd: &str) {
    let ok = Command::new("rabbitmqctl")
        .arg(cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rabbitmqctl");
    assert!(ok.success(), "rabbitmqctl {cmd}");
}

#[tokio::test]
async fn dead_letters_wait_out_a_rabbitmq_outage_and_arrive_once_each() {
    let _one_at_a_time = AMQP.lock().await;
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("outage", &config(&rx.url(), "key", "")).await;
    let exchange = format!("{}.dead-letter", env.name);
    let url = amqp_url();
    let worker = env.worker_with(
        "w",
        &[],
        "5s",
        &["--amqp-url", &url, "--dead-letter-exchange", &exchange],
    );
    // Let the publisher connect and declare its queues, then take the broker away.
    env.wait_until(
        Duration::from_secs(10),
        "the dead-letter queues",
        || async {
            Command::new("rabbitmqctl")
                .args(["list_queues", "name"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains(&format!("{exchange}.failed")))
                .unwrap_or(false)
        },
    )
    .await;
    let back_up = BrokerBackUp;
    rabbitmqctl("stop_app");
    for i in 0..5 {
        env.submit(NewIntent::new(
            "t1",
            format!("refused-{i}"),
            "create_invoice",
            json!({"faults": ["400"]}),
        ))
        .await;
    }
    env.wait_until(Duration::from_secs(20), "five failed intents", || async {
        env.status_counts().await.get("failed") == Some(&5)
    })
    .await;
    // While the broker is down the notifications wait, and publishing is being retried.
    env.wait_until(
        Duration::from_secs(20),
        "a failed publish attempt",
        || async {
            let retried: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM oncebox.outbox WHERE phase = 'notify' AND attempt > 0",
            )
            .fetch_one(&env.pool)
            .await
            .expect("n");
            retried > 0
        },
    )
    .await;
    assert_eq!(
        notify_rows(&env).await,
        5,
        "nothing is lost while RabbitMQ is down"
    );
    drop(back_up); // starts the broker again
    env.wait_until(
        Duration::from_secs(60),
        "every dead letter published",
        || async { notify_rows(&env).await == 0 },
    )
    .await;
    assert!(stop(worker).await.success());
    let messages = drain_queue(&format!("{exchange}.failed")).await;
    let mut ids: Vec<String> = messages.iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    assert_eq!(
        ids,
        (0..5)
            .map(|i| format!("dlq:refused-{i}"))
            .collect::<Vec<_>>(),
        "each once"
    );
    delete_exchange(&exchange).await;
    env.drop_db().await;
}

/// Runs `oncebox ops ...` against the test's database.
fn ops(env: &Env, args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(BIN)
        .arg("ops")
        .args(args)
        .arg("--json")
        .env("DATABASE_URL", &env.url)
        .env("USER", "ana")
        .output()
        .expect("oncebox ops");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let doc = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    (out.status.code().expect("exit code"), doc, stderr)
}

#[tokio::test]
async fn ops_retry_resolve_cancel_purge_show_and_stats() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("ops", &reconcile_config(&rx, "30s")).await;
    env.submit(NewIntent::new(
        "t1",
        "refused",
        "create_invoice",
        json!({"n": 1, "faults": ["400", "ok"]}),
    ))
    .await;
    env.submit(NewIntent::new(
        "t1",
        "twice",
        "create_invoice",
        json!({"n": 2, "faults": ["double"]}),
    ))
    .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_until(
        Duration::from_secs(20),
        "failed and needs_review",
        || async {
            env.status_of("refused").await == "failed"
                && env.status_of("twice").await == "needs_review"
        },
    )
    .await;
    assert!(stop(worker).await.success());

    let (code, listed, _) = ops(&env, &["list", "--status", "failed"]);
    assert_eq!(code, 0);
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["idempotency_key"], "refused");
    assert_eq!(
        ops(&env, &["list", "--status", "done"]).0,
        2,
        "an unknown status is a usage error"
    );

    // Retry: failed -> pending, same key; the next worker delivers it once.
    let (code, retried, err) = ops(&env, &["retry", "refused", "--reason", "receiver fixed"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(retried["status"], "pending");
    assert_eq!(retried["idempotency_key"], "refused");
    // Cancel is refused once an attempt was made.
    let (code, _, err) = ops(&env, &["cancel", "refused"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("attempt"), "{err}");

    // Resolve the ambiguous one by hand.
    let (code, resolved, err) = ops(
        &env,
        &["resolve", "twice", "--succeeded", "--reference", "INV-2"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (
            resolved["status"].as_str(),
            resolved["external_reference"].as_str()
        ),
        (Some("succeeded"), Some("INV-2"))
    );
    assert_eq!(
        ops(&env, &["resolve", "twice", "--failed", "--reason", "x"]).0,
        3,
        "already decided"
    );
    assert_eq!(
        ops(&env, &["retry", "twice"]).0,
        3,
        "a succeeded intent is never retried"
    );
    let (code, shown, _) = ops(&env, &["show", "twice"]);
    assert_eq!(code, 0);
    let outcomes: Vec<&str> = shown["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|h| h["outcome"].as_str())
        .collect();
    assert_eq!(
        outcomes,
        ["unknown", "lookup_ambiguous", "operator_resolved"]
    );
    assert_eq!(shown["history"][2]["worker"], "ops:ana");
    assert_eq!(ops(&env, &["show", "nope"]).0, 4);

    // Cancel before dispatch works; while a worker holds the lease it is refused.
    env.submit(NewIntent::new(
        "t1",
        "later",
        "create_invoice",
        json!({"n": 3}),
    ))
    .await;
    let (code, cancelled, err) = ops(&env, &["cancel", "later"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(cancelled["status"], "cancelled");
    env.submit(NewIntent::new(
        "t1",
        "held",
        "create_invoice",
        json!({"n": 4}),
    ))
    .await;
    sqlx::query(
        "UPDATE oncebox.outbox SET lease_owner = 'w9', lease_expires_at = now() + interval '2 seconds', epoch = epoch + 1
         WHERE intent_id = (SELECT id FROM oncebox.intents WHERE idempotency_key = 'held')",
    )
    .execute(&env.pool)
    .await
    .expect("lease");
    let (code, _, err) = ops(&env, &["cancel", "held"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("w9"), "{err}");

    // The retried intent is delivered by the next worker; cancelled ones never are.
    let worker = env.worker("w2", &[], "5s");
    env.wait_until(
        Duration::from_secs(20),
        "retried and held delivered",
        || async {
            env.status_of("refused").await == "succeeded"
                && env.status_of("held").await == "succeeded"
        },
    )
    .await;
    assert!(stop(worker).await.success());
    assert_eq!(rx.effects().get("refused"), Some(&1));
    assert!(
        !rx.effects().contains_key("later"),
        "a cancelled intent is never sent"
    );

    // Purge: only terminal intents past retention; never a non-terminal one.
    sqlx::query("UPDATE oncebox.intents SET completed_at = now() - interval '40 days' WHERE idempotency_key IN ('refused', 'twice')")
        .execute(&env.pool)
        .await
        .expect("age");
    env.submit(NewIntent::new(
        "t1",
        "still-pending",
        "create_invoice",
        json!({"n": 5}),
    ))
    .await;
    sqlx::query("UPDATE oncebox.intents SET updated_at = now() - interval '40 days', created_at = now() - interval '40 days' WHERE idempotency_key = 'still-pending'")
        .execute(&env.pool)
        .await
        .expect("age");
    assert_eq!(
        ops(&env, &["purge", "--older-than", "1h"]).0,
        2,
        "retention under a day is refused"
    );
    let (code, purged, err) = ops(&env, &["purge"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(purged["purged"], 2);
    let keys: Vec<String> =
        sqlx::query_scalar("SELECT idempotency_key FROM oncebox.intents ORDER BY 1")
            .fetch_all(&env.pool)
            .await
            .expect("keys");
    assert_eq!(keys, ["held", "later", "still-pending"]);
    let orphans: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.attempts a WHERE NOT EXISTS (SELECT 1 FROM oncebox.intents i WHERE i.id = a.intent_id)")
        .fetch_one(&env.pool)
        .await
        .expect("n");
    assert_eq!(orphans, 0, "their history went with them");

    let (code, stats, _) = ops(&env, &["stats"]);
    assert_eq!(code, 0);
    assert!(
        stats["stats"]["by_status"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "{stats}"
    );
    env.drop_db().await;
}

#[tokio::test]
async fn a_reconcile_only_worker_reconciles_and_delivers_nothing() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("reconcile_only", &reconcile_config(&rx, "30s")).await;
    env.submit(NewIntent::new(
        "t1",
        "dropped",
        "create_invoice",
        json!({"n": 1, "faults": ["drop"]}),
    ))
    .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_until(Duration::from_secs(20), "reconciled", || async {
        env.status_of("dropped").await == "succeeded"
    })
    .await;
    assert!(stop(worker).await.success());
    // A second intent lost its answer too, but only a reconcile-only worker runs now.
    env.submit(NewIntent::new(
        "t1",
        "queued",
        "create_invoice",
        json!({"n": 2}),
    ))
    .await;
    sqlx::query(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload, status, attempt_count)
         VALUES ('t1', 'orphan', 'create_invoice', repeat('0', 64), '{\"n\": 3}', 'unknown', 1)",
    )
    .execute(&env.pool)
    .await
    .expect("unknown intent");
    sqlx::query("INSERT INTO oncebox.outbox (intent_id, phase, dispatched_at) SELECT id, 'reconcile', now() - interval '1 hour' FROM oncebox.intents WHERE idempotency_key = 'orphan'")
        .execute(&env.pool)
        .await
        .expect("reconcile row");
    let worker = env.worker_with("r", &[], "5s", &["--reconcile-only"]);
    // Nothing found an hour after dispatch: re-issued (pending), but not delivered by this worker.
    env.wait_until(Duration::from_secs(20), "re-issued", || async {
        env.status_of("orphan").await == "pending"
    })
    .await;
    assert!(stop(worker).await.success());
    assert_eq!(
        env.status_of("queued").await,
        "pending",
        "no delivery by a reconcile-only worker"
    );
    assert_eq!(rx.seen().len(), 1, "only the first worker's POST");
    env.drop_db().await;
}

fn amqp_config(exchange: &str, routing_key: &str) -> String {
    format!(
        r#"
[actions.create_invoice]
destination = "bus"

[destinations.bus]
kind = "amqp"
exchange = "{exchange}"
routing_key = "{routing_key}"
idempotency = "key"
timeout = "3s"

[destinations.bus.retry]
max_attempts = 30
initial_delay = "50ms"
max_delay = "500ms"
"#
    )
}

/// Declares `queue` (durable) whose rejected messages go to `queue.dlq`.
async fn declare_consumer_queue(queue: &str) {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    let dlq = format!("{queue}.dlq");
    channel
        .queue_declare(
            dlq.as_str().into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .expect("dlq");
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-dead-letter-exchange"),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        ShortString::from("x-dead-letter-routing-key"),
        AMQPValue::LongString(LongString::from(dlq)),
    );
    channel
        .queue_declare(queue.into(), QueueDeclareOptions::durable(), args)
        .await
        .expect("queue");
    let _ = conn.close(200, "done".into()).await;
}

async fn delete_queues(names: &[String]) {
    use lapin::options::QueueDeleteOptions;
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    for n in names {
        let _ = channel
            .queue_delete(n.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = conn.close(200, "done".into()).await;
}

/// The consumer's business write: one row per message applied (no unique key on purpose, so a
/// double application would show as an extra row). Fails for messages marked poison.
fn apply_received<'c>(
    conn: &'c mut sqlx::PgConnection,
    d: &'c lapin::message::Delivery,
) -> oncebox_inbox::HandlerFuture<'c, String> {
    let id = d.properties.message_id().as_ref().map(|s| s.to_string());
    let body: Value = serde_json::from_slice(&d.data).unwrap_or(Value::Null);
    Box::pin(async move {
        if body["poison"] == true {
            return Err("cannot apply a poison message".to_owned());
        }
        sqlx::query("INSERT INTO received (message_id, n) VALUES ($1, $2)")
            .bind(id)
            .bind(body["n"].as_i64())
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

async fn start_consumer(
    env: &Env,
    queue: &str,
    max_deliveries: u32,
) -> (
    oncebox_inbox::Inbox,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    sqlx::query("CREATE TABLE IF NOT EXISTS received (message_id text, n bigint)")
        .execute(&env.pool)
        .await
        .expect("table");
    let inbox = oncebox_inbox::Inbox::new(env.pool.clone(), "test-consumer", max_deliveries);
    let cancel = CancellationToken::new();
    let (i, c, q, url) = (inbox.clone(), cancel.clone(), queue.to_owned(), amqp_url());
    let task = tokio::spawn(async move { i.run(&url, &q, 50, apply_received, c).await });
    (inbox, cancel, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_intents_over_amqp_are_applied_exactly_once_across_connection_drops() {
    const N: i64 = 5_000;
    let _one_at_a_time = AMQP.lock().await;
    let name = format!("oncebox_w_amqp5k_{}", std::process::id());
    let queue = format!("{name}.invoices");
    declare_consumer_queue(&queue).await;
    let env = Env::new("amqp5k", &amqp_config("", &queue)).await;
    {
        let mut tx = env.pool.begin().await.expect("begin");
        for i in 0..N {
            env.intake
                .submit(
                    &mut tx,
                    NewIntent::new("t1", format!("bus-{i}"), "create_invoice", json!({"n": i})),
                )
                .await
                .expect("submit");
        }
        tx.commit().await.expect("commit");
    }
    let (inbox, stop_consumer, consumer) = start_consumer(&env, &queue, 5).await;
    let url = amqp_url();
    let dlx = format!("{}.dead-letter", env.name);
    let workers: Vec<Child> = (0..2)
        .map(|w| {
            env.worker_with(
                &format!("w{w}"),
                &[],
                "10s",
                &["--amqp-url", &url, "--dead-letter-exchange", &dlx],
            )
        })
        .collect();
    let applied = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(DISTINCT message_id) FROM received")
            .fetch_one(&env.pool)
            .await
            .expect("n")
    };
    // Force every connection closed twice while messages flow.
    for threshold in [N / 4, N * 3 / 4] {
        env.wait_until(Duration::from_secs(120), "progress", || async {
            applied().await >= threshold
        })
        .await;
        let closed = Command::new("rabbitmqctl")
            .args(["close_all_connections", "oncebox test: forced close"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("rabbitmqctl");
        assert!(closed.success());
    }
    env.wait_until(
        Duration::from_secs(180),
        "every message applied",
        || async { applied().await == N },
    )
    .await;
    env.wait_until(
        Duration::from_secs(60),
        "every intent succeeded",
        || async { env.status_counts().await.get("succeeded") == Some(&N) },
    )
    .await;
    for w in workers {
        assert!(stop(w).await.success());
    }
    // Let the consumer drain whatever duplicates are still queued, then stop it.
    env.wait_until(Duration::from_secs(30), "the queue to drain", || async {
        use lapin::options::QueueDeclareOptions;
        let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
            .await
            .expect("amqp");
        let ch = conn.create_channel().await.expect("channel");
        let q = ch
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
            .expect("passive declare");
        let _ = conn.close(200, "done".into()).await;
        q.message_count() == 0
    })
    .await;
    stop_consumer.cancel();
    consumer.await.expect("consumer");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM received")
        .fetch_one(&env.pool)
        .await
        .expect("rows");
    let c = &inbox.counters;
    let (dups, redelivered) = (
        c.duplicates.load(std::sync::atomic::Ordering::Relaxed),
        c.redelivered.load(std::sync::atomic::Ordering::Relaxed),
    );
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.attempts")
        .fetch_one(&env.pool)
        .await
        .expect("n");
    println!(
        "amqp: {N} intents, {attempts} publish attempts, {redelivered} redeliveries seen, {dups} duplicates filtered by the inbox"
    );
    assert_eq!(
        rows, N,
        "the business table holds exactly one row per intent"
    );
    delete_queues(&[queue.clone(), format!("{queue}.dlq")]).await;
    env.drop_db().await;
}

#[tokio::test]
async fn unroutable_with_mandatory_fails_and_is_dead_lettered() {
    let _one_at_a_time = AMQP.lock().await;
    let env = Env::new("unroutable", &amqp_config("amq.direct", "nowhere-at-all")).await;
    let exchange = format!("{}.dead-letter", env.name);
    env.submit(NewIntent::new(
        "t1",
        "lost-letter",
        "create_invoice",
        json!({"n": 1}),
    ))
    .await;
    let url = amqp_url();
    let worker = env.worker_with(
        "w",
        &[],
        "10s",
        &["--amqp-url", &url, "--dead-letter-exchange", &exchange],
    );
    env.wait_until(Duration::from_secs(20), "failed", || async {
        env.status_of("lost-letter").await == "failed"
    })
    .await;
    env.wait_until(Duration::from_secs(20), "dead letter published", || async {
        notify_rows(&env).await == 0
    })
    .await;
    assert!(stop(worker).await.success());
    let error: Value = sqlx::query_scalar("SELECT last_error FROM oncebox.intents")
        .fetch_one(&env.pool)
        .await
        .expect("error");
    assert_eq!(error["code"], "unroutable");
    let letters = drain_queue(&format!("{exchange}.failed")).await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].0, "dlq:lost-letter");
    delete_exchange(&exchange).await;
    env.drop_db().await;
}

#[tokio::test]
async fn a_poison_message_ends_in_the_consumer_queues_dead_letter_queue() {
    let _one_at_a_time = AMQP.lock().await;
    let name = format!("oncebox_w_poison_{}", std::process::id());
    let queue = format!("{name}.invoices");
    declare_consumer_queue(&queue).await;
    let env = Env::new("poison", &amqp_config("", &queue)).await;
    env.submit(NewIntent::new(
        "t1",
        "good",
        "create_invoice",
        json!({"n": 1}),
    ))
    .await;
    env.submit(NewIntent::new(
        "t1",
        "poison",
        "create_invoice",
        json!({"n": 2, "poison": true}),
    ))
    .await;
    let (inbox, stop_consumer, consumer) = start_consumer(&env, &queue, 3).await;
    let url = amqp_url();
    let dlx = format!("{}.dead-letter", env.name);
    let worker = env.worker_with(
        "w",
        &[],
        "10s",
        &["--amqp-url", &url, "--dead-letter-exchange", &dlx],
    );
    env.wait_until(
        Duration::from_secs(30),
        "the poison message rejected",
        || async {
            inbox
                .counters
                .rejected
                .load(std::sync::atomic::Ordering::Relaxed)
                == 1
        },
    )
    .await;
    assert!(stop(worker).await.success());
    stop_consumer.cancel();
    consumer.await.expect("consumer");
    let dead = drain_queue(&format!("{queue}.dlq")).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].0, "poison");
    let failures: i32 =
        sqlx::query_scalar("SELECT count FROM oncebox_inbox.failures WHERE message_id = 'poison'")
            .fetch_one(&env.pool)
            .await
            .expect("failures");
    assert_eq!(failures, 3, "rejected after 3 tries");
    let rows: Vec<String> = sqlx::query_scalar("SELECT message_id FROM received")
        .fetch_all(&env.pool)
        .await
        .expect("rows");
    assert_eq!(rows, ["good"]);
    delete_queues(&[queue.clone(), format!("{queue}.dlq")]).await;
    env.drop_db().await;
}

#[tokio::test]
async fn rabbitmq_definitions_load_and_match_what_workers_declare() {
    let _one_at_a_time = AMQP.lock().await;
    // Start from a clean slate for the default names: the import keeps an existing queue as it
    // is, whatever its type.
    for reason in oncebox_worker::REASONS {
        let _ = Command::new("rabbitmqctl")
            .args(["delete_queue", &format!("oncebox.dead-letter.{reason}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/rabbitmq/definitions.json"
    );
    let loaded = Command::new("rabbitmqctl")
        .args(["import_definitions", file])
        .output()
        .expect("rabbitmqctl");
    assert!(
        loaded.status.success(),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    let listed = Command::new("rabbitmqctl")
        .args(["list_queues", "name", "type", "policy"])
        .output()
        .expect("list");
    let listed = String::from_utf8_lossy(&listed.stdout);
    for q in [
        "oncebox.dead-letter.failed",
        "oncebox.dead-letter.expired",
        "oncebox.dead-letter.needs_review",
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with(q) && l.contains("quorum")),
            "{q} missing:\n{listed}"
        );
    }
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("oncebox.consumer.invoices\t")
                && l.contains("oncebox-consumer-dead-letters")),
        "policy not applied:\n{listed}"
    );
    // A worker's own declaration of the same topology is accepted (same queue type).
    oncebox_worker::connect_dead_letters(&amqp_url(), "oncebox.dead-letter")
        .await
        .expect("equivalent declaration");
}

/// GET `path` from a worker's probe server: (status code, body).
async fn probe(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return (0, "connection refused".into());
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("request");
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut out)).await;
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (
        code,
        out.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned(),
    )
}

/// The scaled deployment: 20,000 intents drained by one worker, then four, then scaled down by
/// SIGTERM (three) and SIGKILL (one) with a replacement, as a Deployment would. Every intent ends
/// succeeded with exactly one effect; a gracefully stopped worker leaves no lease behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_the_pool_up_and_down_loses_and_duplicates_nothing() {
    const N: usize = 20_000;
    let rx = Receiver::start(ReceiverConfig {
        honours_keys: true,
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver");
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
                        "t1",
                        format!("scale-{i}"),
                        "create_invoice",
                        json!({"n": i, "faults": ["slow:20"]}),
                    ),
                )
                .await
                .expect("submit");
        }
        tx.commit().await.expect("commit");
    }
    let spawn =
        |id: &str, metrics: &str| env.worker_with(id, &[], "3s", &["--metrics-addr", metrics]);
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
    wait_for(500, Duration::from_secs(60)).await; // started and warm
    let (t0, n0) = (Instant::now(), done());
    wait_for(n0 + 3_000, Duration::from_secs(120)).await;
    let one_worker = (done() - n0) as f64 / t0.elapsed().as_secs_f64();

    let added: Vec<(String, String, Child)> = (2..=4)
        .map(|w| {
            let (id, addr) = (format!("scale-w{w}"), free_addr());
            let child = spawn(&id, &addr);
            (id, addr, child)
        })
        .collect();
    wait_for(done() + 500, Duration::from_secs(60)).await; // the new workers are in
    let (t1, n1) = (Instant::now(), done());
    wait_for(n1 + 6_000, Duration::from_secs(120)).await;
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
        assert!(
            metrics.contains("oncebox_leases_lost_total 0"),
            "{id} lost no lease while running"
        );
        let status = stop(child).await;
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
    first.kill().expect("SIGKILL");
    exited(&mut first).await;
    // What it held when it died: in flight, or answered but not yet recorded.
    let held_by_killed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox WHERE lease_owner = 'scale-w1'")
            .fetch_one(&env.pool)
            .await
            .expect("held");
    let replacement = spawn("scale-w5", &free_addr());
    env.wait_until(
        Duration::from_secs(240),
        "every intent terminal",
        || async {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM oncebox.intents WHERE completed_at IS NULL",
            )
            .fetch_one(&env.pool)
            .await
            .expect("open")
                == 0
        },
    )
    .await;
    assert!(stop(replacement).await.success());

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

/// A worker's probes: /healthz is about the process and its loops, /readyz about the database.
/// A database outage (its connections cut, new ones refused) makes the worker unready but not
/// unhealthy — restarting would not help; a delivery loop wedged for three leases makes it
/// unhealthy while it is still ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_probes_tell_a_database_outage_from_a_stuck_loop() {
    let env = Env::new("probes", &config("http://127.0.0.1:9/x", "key", "")).await;
    // A TCP proxy to Postgres that can be cut: every connection closed, new ones refused.
    let cut = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let proxy_addr = listener.local_addr().expect("addr");
    let authority = env
        .url
        .split("://")
        .nth(1)
        .and_then(|u| u.split('/').next())
        .expect("authority")
        .to_owned();
    let upstream = authority.rsplit('@').next().expect("host").to_owned();
    let proxied = env.url.replacen(&upstream, &proxy_addr.to_string(), 1);
    let stop = cut.clone();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.cancelled() => return,
                a = listener.accept() => a,
            };
            let Ok((mut client, _)) = accepted else {
                return;
            };
            let (stop, upstream) = (stop.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                    return;
                };
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                }
            });
        }
    });
    let worker = |url: &str, addr: &str, crash: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args(["worker", "--config"])
            .arg(&env.config)
            .args([
                "--lease",
                "3s",
                "--poll-interval",
                "100ms",
                "--metrics-addr",
                addr,
            ])
            .env("DATABASE_URL", url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(point) = crash {
            cmd.env("ONCEBOX_CRASH_AT", point);
        }
        cmd.spawn().expect("worker")
    };

    // An outage: not ready, still alive.
    let outage_addr = free_addr();
    let mut outage = worker(&proxied, &outage_addr, None);
    env.wait_until(Duration::from_secs(20), "the probes answer", || async {
        probe(&outage_addr, "/readyz").await.0 == 200
    })
    .await;
    assert_eq!(
        probe(&outage_addr, "/healthz").await,
        (200, "ok\n".to_owned())
    );
    assert_eq!(probe(&outage_addr, "/nope").await.0, 404);
    cut.cancel();
    let (code, body) = probe(&outage_addr, "/readyz").await;
    assert_eq!(code, 503, "the database is unreachable: not ready");
    assert!(body.starts_with("database:"), "{body}");
    // Its loops keep turning (failing claims, waiting a poll interval): alive, for longer than
    // the three leases after which a loop counts as stuck.
    let outage_started = Instant::now();
    while outage_started.elapsed() < Duration::from_secs(11) {
        assert_eq!(
            probe(&outage_addr, "/healthz").await.0,
            200,
            "a database outage must not fail liveness (restarts would not help)"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    outage.kill().expect("kill");
    exited(&mut outage).await;

    // A wedged delivery loop: alive until it has not turned for three leases, then 503.
    let stuck_addr = free_addr();
    let mut stuck = worker(&env.url, &stuck_addr, Some("hang_after_claim"));
    env.wait_until(Duration::from_secs(20), "the probes answer", || async {
        probe(&stuck_addr, "/healthz").await.0 == 200
    })
    .await;
    env.submit(NewIntent::new("t1", "wedge", "create_invoice", json!({})))
        .await;
    let submitted = Instant::now();
    env.wait_until(
        Duration::from_secs(30),
        "/healthz to report the stuck loop",
        || async { probe(&stuck_addr, "/healthz").await.0 == 503 },
    )
    .await;
    let (_, body) = probe(&stuck_addr, "/healthz").await;
    assert!(body.contains("deliver loop has not turned"), "{body}");
    assert!(
        submitted.elapsed() >= Duration::from_secs(8),
        "stuck means three leases (9 s) without a turn: {:?}",
        submitted.elapsed()
    );
    assert_eq!(
        probe(&stuck_addr, "/readyz").await.0,
        200,
        "the database is fine"
    );
    stuck.kill().expect("kill");
    exited(&mut stuck).await;
    env.drop_db().await;
}
