//! `oncebox demo`: the main job, end to end, with faults injected.
//!
//! Agents record orders and their `create_invoice` intents in one transaction each, while the
//! demo cuts their database connections before commit, drops answers after commit (the agent
//! retries with the same key), races two agents on one key, and reuses keys with other
//! arguments. Meanwhile a pool of real `oncebox worker` processes delivers the intents to an
//! in-process reference receiver that drops a tenth of its answers after executing and answers
//! some first attempts 503 with Retry-After; one worker is SIGKILLed mid-run and restarted.
//! The demo waits until every intent is terminal and counts effects at the receiver: exactly
//! one per intent, or it exits non-zero.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_core::NewIntent;
use oncebox_core::config::Config;
use oncebox_inbox::{HandlerFuture, Inbox};
use oncebox_receiver::{Receiver, ReceiverConfig};
use oncebox_store::{Intake, SubmitError};
use serde_json::json;
use sqlx::{PgPool, Row};
use tokio_util::sync::CancellationToken;

use crate::cli::DemoArgs;
use crate::exit::{CliError, CliResult};
use crate::scratch::ScratchDb;

fn demo_config(
    receiver_url: &str,
    archive_url: &str,
    amqp_url: &str,
    events_queue: &str,
) -> String {
    format!(
        r#"
[actions.publish_event]
destination = "events"
redact = [{{ pointer = "/customer/email", mode = "hash" }}]

# RabbitMQ: message_id = key; the consumer's inbox applies each once.
[destinations.events]
kind = "amqp"
amqp_url = "{amqp_url}"
exchange = ""
routing_key = "{events_queue}"
idempotency = "key"
timeout = "1s"

[actions.create_invoice]
destination = "billing"
redact = [{{ pointer = "/customer/email", mode = "hash" }}]

[actions.file_document]
destination = "archive"
redact = [{{ pointer = "/customer/email", mode = "hash" }}]

# Does not honour keys: unknown outcomes are looked up, never re-sent blindly.
[destinations.archive]
kind = "http"
url = "{archive_url}"
idempotency = "lookup"
timeout = "1s"
reference_pointer = "/id"
consistency_window = "5s"

[destinations.archive.lookup]
url = "{archive_url}?key={{key}}"
results_pointer = "/data"
fields = ["/order_id", "/amount"]
reference_pointer = "/id"
timeout = "1s"

[destinations.billing]
kind = "http"
url = "{receiver_url}"
idempotency = "key"
timeout = "1s"
reference_pointer = "/id"

[destinations.billing.retry]
max_attempts = 20
initial_delay = "50ms"
max_delay = "1s"
"#
    )
}

/// Worker processes of the demo's pool.
const WORKERS: usize = 3;

/// What the agents did and saw.
#[derive(Default)]
struct Tally {
    calls: AtomicUsize,
    created: AtomicUsize,
    replayed: AtomicUsize,
    conflicts: AtomicUsize,
    cut: AtomicUsize,
    answers_dropped: AtomicUsize,
    wrong_replay: AtomicUsize,
}

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// The agent's connection is terminated by the server before commit.
    CutBeforeCommit,
    /// The commit succeeds but its answer is lost: the agent retries.
    AnswerLost,
    /// Two agents submit the same key at once.
    Race,
    /// After success the agent reuses the key with other arguments (an agent bug).
    KeyReuse,
}

fn fault_for(i: usize) -> Fault {
    match i % 10 {
        1 | 6 => Fault::CutBeforeCommit,
        2 | 7 => Fault::AnswerLost,
        3 => Fault::Race,
        4 => Fault::KeyReuse,
        _ => Fault::None,
    }
}

pub(crate) async fn run(args: DemoArgs, json_out: bool) -> CliResult {
    if args.intents == 0 || args.agents == 0 {
        return Err(CliError::usage(
            "intents",
            "--intents and --agents must be at least 1",
        ));
    }
    let started = Instant::now();
    let scratch = ScratchDb::create(&args.database_url, &args.database_name).await?;
    let receiver = Receiver::start(ReceiverConfig {
        honours_keys: true,
        drop_rate: 0.10,
        seed: 7,
    })
    .await
    .context("cannot start the reference receiver")?;
    let archive = Receiver::start(ReceiverConfig {
        honours_keys: false,
        drop_rate: 0.10,
        seed: 11,
    })
    .await
    .context("cannot start the archive receiver")?;
    let events_queue = format!("{}.events", scratch.name);
    declare_queue(&args.amqp_url, &events_queue).await?;
    let config_text = demo_config(
        &receiver.url(),
        &archive.url(),
        &args.amqp_url,
        &events_queue,
    );
    let config = Config::from_toml(&config_text)
        .map_err(|e| CliError::Other(anyhow::anyhow!("demo config: {e}")))?;
    let config_path =
        std::env::temp_dir().join(format!("{}-{}.toml", scratch.name, std::process::id()));
    std::fs::write(&config_path, &config_text).context("cannot write the demo's config file")?;
    let intake = Intake::new(&config);
    let mut pool_of_workers = WorkerPool {
        children: Vec::new(),
        config: config_path.clone(),
        url: scratch.url.clone(),
        spawned: 0,
    };
    for _ in 0..WORKERS {
        pool_of_workers.spawn()?;
    }
    let pool = scratch
        .pool(u32::try_from(args.agents * 2 + 2).unwrap_or(64))
        .await?;
    sqlx::query("CREATE TABLE demo_orders (order_id text PRIMARY KEY, amount text NOT NULL, invoice_key text NOT NULL)")
        .execute(&pool)
        .await?;

    sqlx::query("CREATE TABLE demo_events (message_id text, body jsonb)")
        .execute(&pool)
        .await?;
    let inbox = Inbox::new(pool.clone(), "demo-events", 5);
    let stop_consumer = CancellationToken::new();
    let consumer = {
        let (inbox, url, queue, stop) = (
            inbox.clone(),
            args.amqp_url.clone(),
            events_queue.clone(),
            stop_consumer.clone(),
        );
        tokio::spawn(async move { inbox.run(&url, &queue, 64, apply_event, stop).await })
    };

    let tally = Arc::new(Tally::default());
    let mut agents = Vec::new();
    for agent in 0..args.agents {
        let (pool, intake, tally) = (pool.clone(), intake.clone(), tally.clone());
        let n = args.intents;
        let count = args.agents;
        agents.push(tokio::spawn(async move {
            for i in (agent..n).step_by(count) {
                run_intent(&pool, &intake, &tally, i).await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    // Mid-run, one worker dies without warning (SIGKILL) and a replacement starts.
    tokio::time::sleep(Duration::from_millis(400)).await;
    pool_of_workers.kill_one()?;
    pool_of_workers.spawn()?;
    for a in agents {
        a.await.context("an agent panicked")??;
    }
    // Wait until every intent is terminal (or give up after 45 s: those count as lost).
    let wait_start = Instant::now();
    loop {
        let open: i64 =
            sqlx::query_scalar("SELECT count(*) FROM oncebox.intents WHERE completed_at IS NULL")
                .fetch_one(&pool)
                .await?;
        if open == 0 || wait_start.elapsed() > Duration::from_secs(45) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pool_of_workers.stop_all().await;
    let _ = std::fs::remove_file(&config_path);
    // Every published event is applied by the consumer (a few seconds at most).
    let published: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM oncebox.intents WHERE action = 'publish_event' AND status = 'succeeded'",
    )
    .fetch_one(&pool)
    .await?;
    let wait_start = Instant::now();
    while wait_start.elapsed() < Duration::from_secs(20) {
        let applied: i64 = sqlx::query_scalar("SELECT count(DISTINCT message_id) FROM demo_events")
            .fetch_one(&pool)
            .await?;
        if applied >= published {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_consumer.cancel();
    let _ = consumer.await;
    delete_queue(&args.amqp_url, &events_queue).await;

    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM oncebox.intents) AS journal,
                (SELECT count(*) FROM oncebox.outbox) AS outbox,
                (SELECT count(*) FROM demo_orders) AS orders,
                (SELECT count(*) FROM demo_orders o
                   WHERE NOT EXISTS (SELECT 1 FROM oncebox.intents i WHERE i.idempotency_key = o.invoice_key)) AS orphans,
                (SELECT count(*) FROM oncebox.intents WHERE payload::text LIKE '%@example.com%') AS unredacted,
                (SELECT count(*) FROM oncebox.attempts) AS attempts,
                (SELECT count(*) FROM oncebox.attempts WHERE outcome = 'unknown') AS unknown_attempts,
                (SELECT count(*) FROM oncebox.attempts WHERE outcome = 'retry_before_execution') AS busy_attempts,
                (SELECT count(*) FROM oncebox.attempts WHERE outcome = 'lookup_found') AS reconciled",
    )
    .fetch_one(&pool)
    .await?;
    let get = |c: &str| row.get::<i64, _>(c) as usize;
    let (journal, outbox, orders, orphans, unredacted) = (
        get("journal"),
        get("outbox"),
        get("orders"),
        get("orphans"),
        get("unredacted"),
    );
    let (attempts, unknown_attempts, busy_attempts, reconciled) = (
        get("attempts"),
        get("unknown_attempts"),
        get("busy_attempts"),
        get("reconciled"),
    );
    let by_status: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM oncebox.intents GROUP BY status ORDER BY status",
    )
    .fetch_all(&pool)
    .await?;
    let succeeded_keys: Vec<String> = sqlx::query_scalar(
        "SELECT idempotency_key FROM oncebox.intents WHERE status = 'succeeded'",
    )
    .fetch_all(&pool)
    .await?;
    let mut effects = receiver.effects();
    effects.extend(archive.effects());
    let applied: Vec<(String, i64)> =
        sqlx::query_as("SELECT message_id, count(*) FROM demo_events GROUP BY message_id")
            .fetch_all(&pool)
            .await?;
    let events_applied = applied.len();
    for (key, n) in applied {
        effects.insert(key, u32::try_from(n).unwrap_or(u32::MAX));
    }
    let filtered = inbox.counters.duplicates.load(Ordering::Relaxed) as usize;
    let effect_total: usize = effects.values().map(|c| *c as usize).sum();
    let requests = receiver.seen().len() + archive.seen().len();
    let n = args.intents;
    // A duplicate: a second journal row, a second effect for one key, or a replay that named
    // another intent. Lost: an intent or business row missing, an intent not terminal, a
    // succeeded intent without its effect, or an effect without its intent.
    let duplicates = journal.saturating_sub(n)
        + effects
            .values()
            .map(|c| (*c as usize).saturating_sub(1))
            .sum::<usize>()
        + tally.wrong_replay.load(Ordering::Relaxed);
    let terminal: usize = by_status
        .iter()
        .filter(|(st, _)| ["succeeded", "failed", "cancelled", "expired"].contains(&st.as_str()))
        .map(|(_, c)| *c as usize)
        .sum();
    let missing_effects = succeeded_keys
        .iter()
        .filter(|k| !effects.contains_key(*k))
        .count();
    let lost = n.saturating_sub(journal)
        + n.saturating_sub(orders)
        + orphans
        + journal.saturating_sub(terminal)
        + missing_effects
        + effects.len().saturating_sub(succeeded_keys.len());
    let t = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let ok = duplicates == 0 && lost == 0 && unredacted == 0 && outbox == 0;

    if json_out {
        println!(
            "{}",
            json!({
                "intents": n, "agents": args.agents, "submit_calls": t(&tally.calls),
                "created": t(&tally.created), "replayed": t(&tally.replayed),
                "conflicts_refused": t(&tally.conflicts), "connections_cut": t(&tally.cut),
                "answers_dropped": t(&tally.answers_dropped),
                "journal_rows": journal, "outbox_rows_left": outbox, "business_rows": orders,
                "attempts": attempts, "attempts_unknown": unknown_attempts, "attempts_busy": busy_attempts,
                "reconciled": reconciled, "events_applied": events_applied, "redeliveries_filtered": filtered,
                "receiver_requests": requests, "effects": effect_total, "workers_killed": 1,
                "by_status": by_status.iter().map(|(s, c)| (s.clone(), json!(c))).collect::<serde_json::Map<_, _>>(),
                "unredacted": unredacted,
                "duplicates": duplicates, "lost": lost, "ok": ok,
                "seconds": started.elapsed().as_secs_f64(),
            })
        );
    } else {
        println!(
            "oncebox demo — {n} intents from {} agents to 2 receivers (one honours keys, one is looked up), {WORKERS} worker processes (1 SIGKILLed), faults injected",
            args.agents
        );
        let needs_review = by_status
            .iter()
            .find(|(st, _)| st.as_str() == "needs_review")
            .map_or(0, |(_, c)| *c as usize);
        let rows: [(&str, usize); 19] = [
            ("intake: submit calls (with retries)", t(&tally.calls)),
            ("  created", t(&tally.created)),
            ("  replayed (same key, same request)", t(&tally.replayed)),
            ("  refused: key reused, other request", t(&tally.conflicts)),
            ("  connections cut before commit", t(&tally.cut)),
            ("  answers lost after commit", t(&tally.answers_dropped)),
            ("journal rows (intents)", journal),
            ("business rows (same transactions)", orders),
            ("delivery: attempts", attempts),
            ("  unknown (answer dropped)", unknown_attempts),
            ("    of which resolved by lookup", reconciled),
            ("  503 with Retry-After", busy_attempts),
            ("  requests at the receiver", requests),
            ("  events applied by the inbox consumer", events_applied),
            ("  redeliveries filtered by the inbox", filtered),
            ("effects (receivers + consumer)", effect_total),
            ("duplicates", duplicates),
            ("lost", lost),
            ("needs review", needs_review),
        ];
        for (k, v) in rows {
            println!("  {k:<38} {v:>6}");
        }
        let statuses: Vec<String> = by_status
            .iter()
            .map(|(st, c)| format!("{st} {c}"))
            .collect();
        println!("  {:<38} {}", "by status", statuses.join(", "));
        println!(
            "  {:<38} {:>6}\n{} in {:.1} s (database {} {})",
            "payloads with an email in clear",
            unredacted,
            if ok { "OK" } else { "FAILED" },
            started.elapsed().as_secs_f64(),
            scratch.name,
            if args.keep { "kept" } else { "dropped" }
        );
    }
    pool.close().await;
    if !args.keep {
        scratch.drop_db().await?;
    }
    if ok {
        Ok(())
    } else {
        Err(CliError::Other(anyhow::anyhow!(
            "{duplicates} duplicates, {lost} lost, {unredacted} unredacted"
        )))
    }
}

fn intent_for(i: usize) -> NewIntent {
    NewIntent {
        business_ref: Some(format!("order-{i}")),
        run_id: Some(format!("run-{}", i % 7)),
        ..NewIntent::new(
            "tenant-demo",
            format!("invoice-order-{i}"),
            // Every third order files a document at the archive, which does not honour keys.
            if i % 3 == 1 {
                "file_document"
            } else if i % 5 == 3 {
                // And some publish an event over RabbitMQ.
                "publish_event"
            } else {
                "create_invoice"
            },
            if i.is_multiple_of(7) {
                // The billing system is busy at first: 503 with Retry-After: 1.
                json!({"order_id": format!("order-{i}"), "amount": format!("{}.00", 100 + i),
                       "customer": {"email": format!("buyer{i}@example.com")}, "faults": ["503:1", "ok"]})
            } else {
                json!({"order_id": format!("order-{i}"), "amount": format!("{}.00", 100 + i),
                       "customer": {"email": format!("buyer{i}@example.com")}})
            },
        )
    }
}

/// One agent's work for order `i`: record the order and its intent together, surviving the
/// fault chosen for `i`. Returns once the intent is known to be recorded.
async fn run_intent(pool: &PgPool, intake: &Intake, tally: &Tally, i: usize) -> anyhow::Result<()> {
    let fault = fault_for(i);
    let mut first_id = None;
    let mut tries = 0;
    loop {
        tries += 1;
        let inject = tries == 1 && fault != Fault::None;
        let mut conn = pool.acquire().await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *conn)
            .await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        sqlx::query(
            "INSERT INTO demo_orders VALUES ($1, $2, $3) ON CONFLICT (order_id) DO NOTHING",
        )
        .bind(format!("order-{i}"))
        .bind(format!("{}.00", 100 + i))
        .bind(format!("invoice-order-{i}"))
        .execute(&mut *tx)
        .await?;
        tally.calls.fetch_add(1, Ordering::Relaxed);
        let submitted = intake.submit(&mut tx, intent_for(i)).await?;
        if inject && fault == Fault::CutBeforeCommit {
            sqlx::query("SELECT pg_terminate_backend($1, 5000)")
                .bind(pid)
                .execute(pool)
                .await?;
            let commit = tx.commit().await;
            anyhow::ensure!(
                commit.is_err(),
                "order-{i}: commit succeeded on a terminated connection"
            );
            conn.detach();
            tally.cut.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        tx.commit().await?;
        if submitted.created {
            tally.created.fetch_add(1, Ordering::Relaxed);
        } else {
            tally.replayed.fetch_add(1, Ordering::Relaxed);
        }
        if first_id.is_some_and(|id| id != submitted.intent.id) {
            tally.wrong_replay.fetch_add(1, Ordering::Relaxed);
        }
        first_id = Some(submitted.intent.id);
        if inject && fault == Fault::AnswerLost {
            tally.answers_dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if inject && fault == Fault::Race {
            // A second agent, unaware of the first, submits the same key concurrently.
            let (a, b) = tokio::join!(
                submit_alone(pool, intake, intent_for(i)),
                submit_alone(pool, intake, intent_for(i))
            );
            for s in [a?, b?] {
                tally.calls.fetch_add(1, Ordering::Relaxed);
                tally.replayed.fetch_add(1, Ordering::Relaxed);
                if s.intent.id != submitted.intent.id || s.created {
                    tally.wrong_replay.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if inject && fault == Fault::KeyReuse {
            let mut other = intent_for(i);
            other.arguments["amount"] = json!("0.01");
            tally.calls.fetch_add(1, Ordering::Relaxed);
            match submit_alone(pool, intake, other).await {
                Err(e)
                    if matches!(
                        e.downcast_ref::<SubmitError>(),
                        Some(SubmitError::KeyConflict { .. })
                    ) =>
                {
                    tally.conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
                Ok(_) => anyhow::bail!("order-{i}: a reused key with other arguments was accepted"),
            }
        }
        return Ok(());
    }
}

async fn submit_alone(
    pool: &PgPool,
    intake: &Intake,
    intent: NewIntent,
) -> anyhow::Result<oncebox_store::Submitted> {
    let mut tx = pool.begin().await?;
    let s = intake.submit(&mut tx, intent).await?;
    tx.commit().await?;
    Ok(s)
}

/// The demo's worker processes: this very binary, run as `oncebox worker`.
struct WorkerPool {
    children: Vec<Child>,
    config: PathBuf,
    url: String,
    spawned: usize,
}

impl WorkerPool {
    fn spawn(&mut self) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("cannot find the oncebox binary")?;
        let child = Command::new(exe)
            .args(["worker", "--config"])
            .arg(&self.config)
            .args([
                "--id",
                &format!("demo-worker-{}", self.spawned),
                "--lease",
                "3s",
            ])
            .args([
                "--poll-interval",
                "100ms",
                "--grace",
                "2s",
                "--concurrency",
                "32",
            ])
            .env("DATABASE_URL", &self.url)
            .env_remove("ONCEBOX_CRASH_AT")
            // Dead letters are not published in the demo (none are expected): keep its output clean.
            .env("ONCEBOX_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start a worker process")?;
        self.spawned += 1;
        self.children.push(child);
        Ok(())
    }

    /// SIGKILL: the worker gets no chance to finish or release anything.
    fn kill_one(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.children.pop() {
            child.kill().context("cannot kill a worker")?;
            child.wait().context("cannot reap a worker")?;
        }
        Ok(())
    }

    /// SIGTERM to every worker, then wait for them to exit.
    async fn stop_all(&mut self) {
        for child in &self.children {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
        }
        for mut child in self.children.drain(..) {
            while matches!(child.try_wait(), Ok(None)) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The events consumer's business write, in the inbox's transaction.
fn apply_event<'c>(
    conn: &'c mut sqlx::PgConnection,
    d: &'c lapin::message::Delivery,
) -> HandlerFuture<'c, sqlx::Error> {
    let id = d.properties.message_id().as_ref().map(|s| s.to_string());
    let body: serde_json::Value =
        serde_json::from_slice(&d.data).unwrap_or(serde_json::Value::Null);
    Box::pin(async move {
        sqlx::query("INSERT INTO demo_events (message_id, body) VALUES ($1, $2)")
            .bind(id)
            .bind(sqlx::types::Json(body))
            .execute(conn)
            .await
            .map(|_| ())
    })
}

async fn declare_queue(url: &str, queue: &str) -> anyhow::Result<()> {
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .context("cannot connect to RabbitMQ (AMQP_URL); scripts/demo.sh starts it")?;
    let channel = conn.create_channel().await?;
    channel
        .queue_declare(
            queue.into(),
            lapin::options::QueueDeclareOptions::durable(),
            lapin::types::FieldTable::default(),
        )
        .await?;
    let _ = conn.close(200, "done".into()).await;
    Ok(())
}

async fn delete_queue(url: &str, queue: &str) {
    if let Ok(conn) = lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await
    {
        if let Ok(channel) = conn.create_channel().await {
            let _ = channel
                .queue_delete(queue.into(), lapin::options::QueueDeleteOptions::default())
                .await;
        }
        let _ = conn.close(200, "done".into()).await;
    }
}
