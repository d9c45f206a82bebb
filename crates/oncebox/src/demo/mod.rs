//! `oncebox demo`: the main job, end to end, with faults injected.
//!
//! Agents record orders and their intents in one transaction each, while the demo cuts their
//! database connections before commit, drops answers after commit (the agent retries with the
//! same key), races two agents on one key, and reuses keys with other arguments. Meanwhile a
//! pool of real `oncebox worker` processes delivers the intents to two in-process reference
//! receivers that drop a tenth of their answers after executing (one honours keys, one is looked
//! up) and to RabbitMQ, applied by an inbox consumer; one worker is SIGKILLed mid-run and
//! replaced. The demo waits until every intent is terminal and counts effects: exactly one per
//! intent, or it exits non-zero. Its database, worker processes, config file and queue are
//! cleaned up however it ends.

mod agents;
mod events;
mod queries;
mod report;
mod workers;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_core::config::Config;
use oncebox_core::redact::{RedactionKey, RedactionKeys};
use oncebox_inbox::Inbox;
use oncebox_receiver::{Receiver, ReceiverConfig};
use oncebox_store::Intake;
use oncebox_store::scratch::ScratchDb;
use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::exit::{CliError, CliResult};
use agents::Tally;
use report::{Observed, Report};
use workers::{WORKERS, WorkerPool};

/// How long the demo waits for every intent to be terminal; those still open count as lost.
const SETTLE_WITHIN: Duration = Duration::from_secs(45);
/// How long it waits for the consumer to apply every published event.
const EVENTS_WITHIN: Duration = Duration::from_secs(20);
/// When, after the agents start, one worker is killed.
const KILL_AFTER: Duration = Duration::from_millis(400);

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

/// A file removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_file(&self.0) {
            tracing::debug!(error = %e, file = %self.0.display(), "could not remove the demo's config file");
        }
    }
}

/// Everything a run sets up, each piece cleaned up when dropped (the database by
/// [`ScratchDb`], the workers by their pool, the file by [`TempFile`], the queue by the broker
/// once unused) — and in order by [`Demo::tear_down`] on the normal path.
struct Demo {
    scratch: ScratchDb,
    pool: PgPool,
    intake: Intake,
    receiver: Receiver,
    archive: Receiver,
    workers: WorkerPool,
    _config: TempFile,
    inbox: Inbox,
    consumer: (CancellationToken, JoinHandle<()>),
    events_queue: String,
    amqp_url: String,
}

/// Run the end-to-end demonstration with injected faults, in its own database.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Postgres URL of the server; the demo creates its own database there (see --database-name).
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub(crate) database_url: String,
    /// RabbitMQ URL: one action of the demo publishes events, applied by an inbox consumer.
    #[arg(
        long,
        env = "AMQP_URL",
        hide_env_values = true,
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub(crate) amqp_url: String,
    /// The demo's database, dropped and created anew on every run.
    #[arg(long, default_value = "oncebox_demo")]
    pub(crate) database_name: String,
    /// How many distinct intents the agents submit.
    #[arg(long, default_value_t = 300)]
    pub(crate) intents: usize,
    /// Concurrent agents.
    #[arg(long, default_value_t = 16)]
    pub(crate) agents: usize,
    /// Keep the demo database afterwards for inspection.
    #[arg(long)]
    pub(crate) keep: bool,
}

pub(crate) async fn run(args: Args, json_out: bool) -> CliResult {
    if args.intents == 0 || args.agents == 0 {
        return Err(CliError::usage(
            "intents",
            "--intents and --agents must be at least 1",
        ));
    }
    let started = Instant::now();
    let mut demo = Demo::set_up(&args).await?;
    let outcome = demo.exercise(&args).await;
    let report = match outcome {
        Ok(tally) => demo.report(&args, &tally, json_out, started).await,
        Err(e) => Err(e),
    };
    demo.tear_down(args.keep).await?;
    let report = report?;
    if report.ok() {
        Ok(())
    } else {
        Err(CliError::Other(anyhow::anyhow!(
            "{} duplicates, {} lost, {} unredacted",
            report.duplicates,
            report.lost,
            report.unredacted
        )))
    }
}

impl Demo {
    /// The database, the receivers, the queue and its consumer, the config file and the
    /// workers.
    async fn set_up(args: &Args) -> anyhow::Result<Demo> {
        let scratch = ScratchDb::create(&args.database_url, &args.database_name, true).await?;
        // Both drop a tenth of their answers after executing.
        let start = async |honours_keys, seed| {
            Receiver::start(ReceiverConfig {
                honours_keys,
                drop_rate: 0.10,
                seed,
                lookup_token: None,
                keep_no_bodies: false,
                keep_no_history: false,
            })
            .await
            .context("cannot start a reference receiver")
        };
        let receiver = start(true, 7).await?;
        let archive = start(false, 11).await?;
        let events_queue = format!("{}.events", scratch.name);
        events::declare_queue(&args.amqp_url, &events_queue)
            .await
            .context("cannot reach RabbitMQ (AMQP_URL); scripts/demo.sh starts it")?;
        let config_text = demo_config(
            &receiver.url(),
            &archive.url(),
            &args.amqp_url,
            &events_queue,
        );
        let config = Config::from_toml(&config_text).context("the demo's config")?;
        let config_path =
            std::env::temp_dir().join(format!("{}-{}.toml", scratch.name, std::process::id()));
        tokio::fs::write(&config_path, &config_text)
            .await
            .context("cannot write the demo's config file")?;
        let config_file = TempFile(config_path.clone());
        let mut workers = WorkerPool::new(config_path, scratch.url.clone());
        for _ in 0..WORKERS {
            workers.spawn()?;
        }
        let pool = scratch
            .pool(u32::try_from(args.agents * 2 + 2).unwrap_or(64))
            .await?;
        sqlx::raw_sql(queries::TABLES).execute(&pool).await?;
        let inbox = Inbox::new(pool.clone(), "demo-events", 5);
        let stop = CancellationToken::new();
        let consumer = {
            let (inbox, url, queue, stop) = (
                inbox.clone(),
                args.amqp_url.clone(),
                events_queue.clone(),
                stop.clone(),
            );
            tokio::spawn(
                async move { inbox.run(&url, &queue, 64, events::apply_event, stop).await },
            )
        };
        Ok(Demo {
            scratch,
            pool,
            intake: Intake::new(&config, Some(demo_redaction_keys()?))?,
            receiver,
            archive,
            workers,
            _config: config_file,
            inbox,
            consumer: (stop, consumer),
            events_queue,
            amqp_url: args.amqp_url.clone(),
        })
    }

    /// The agents submit while one worker is killed and replaced; then every intent settles,
    /// the workers stop and the consumer applies every published event.
    async fn exercise(&mut self, args: &Args) -> anyhow::Result<Arc<Tally>> {
        let tally = Arc::new(Tally::default());
        let mut agents = Vec::new();
        for agent in 0..args.agents {
            let (pool, intake, tally) = (self.pool.clone(), self.intake.clone(), tally.clone());
            let (n, count) = (args.intents, args.agents);
            agents.push(tokio::spawn(async move {
                for i in (agent..n).step_by(count) {
                    agents::run_intent(&pool, &intake, &tally, i).await?;
                }
                Ok::<_, anyhow::Error>(())
            }));
        }
        // Mid-run, one worker dies without warning (SIGKILL) and a replacement starts.
        tokio::time::sleep(KILL_AFTER).await;
        self.workers.kill_one().await?;
        self.workers.spawn()?;
        for a in agents {
            a.await.context("an agent panicked")??;
        }
        wait_until(SETTLE_WITHIN, || async {
            Ok(self.count(queries::OPEN).await? == 0)
        })
        .await?;
        self.workers.stop_all().await?;
        let published = self.count(queries::PUBLISHED).await?;
        wait_until(EVENTS_WITHIN, || async {
            Ok(self.count(queries::APPLIED).await? >= published)
        })
        .await?;
        Ok(tally)
    }

    /// The count one of the demo's queries returns.
    async fn count(&self, sql: &'static str) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar(sql).fetch_one(&self.pool).await?)
    }

    /// Counts and prints what happened.
    async fn report(
        &self,
        args: &Args,
        tally: &Tally,
        json_out: bool,
        started: Instant,
    ) -> anyhow::Result<Report> {
        let mut effects = self.receiver.effects();
        effects.extend(self.archive.effects());
        let observed = Observed {
            effects,
            requests: self.receiver.seen().len() + self.archive.seen().len(),
            filtered: self.inbox.counters.duplicates.load(Ordering::Relaxed) as usize,
        };
        let report = Report::collect(&self.pool, tally, args.intents, observed).await?;
        let seconds = started.elapsed().as_secs_f64();
        if json_out {
            println!("{}", report.json(tally, args.agents, seconds));
        } else {
            println!(
                "oncebox demo — {} intents from {} agents to 2 receivers (one honours keys, one is looked up), {WORKERS} worker processes (1 SIGKILLed), faults injected",
                args.intents, args.agents
            );
            report.print(tally);
            println!(
                "{} in {seconds:.1} s (database {} {})",
                if report.ok() { "OK" } else { "FAILED" },
                self.scratch.name,
                if args.keep { "kept" } else { "dropped" }
            );
        }
        Ok(report)
    }

    /// Stops the consumer and the workers, deletes the queue, closes the pool and drops the
    /// database (unless kept).
    async fn tear_down(mut self, keep: bool) -> anyhow::Result<()> {
        let (stop, consumer) = self.consumer;
        stop.cancel();
        consumer.await.context("the events consumer panicked")?;
        self.workers.stop_all().await?;
        if let Err(e) = events::delete_queue(&self.amqp_url, &self.events_queue).await {
            tracing::warn!(error = %e, queue = %self.events_queue, "could not delete the demo's queue; the broker removes it when unused");
        }
        self.pool.close().await;
        if keep {
            self.scratch.keep();
        } else {
            self.scratch.drop_db().await?;
        }
        Ok(())
    }
}

/// Polls `done` every 100 ms until it holds or `limit` passes (then gives up quietly: what is
/// still open is counted as lost).
async fn wait_until<F, Fut>(limit: Duration, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    while !done().await? && start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// The demo's redaction keys: those of the environment ([`RedactionKeys::ENV`]) if set, else a
/// fresh random key for this run only (the demo's journal is dropped at its end anyway).
fn demo_redaction_keys() -> anyhow::Result<RedactionKeys> {
    if let Some(keys) = RedactionKeys::from_env().map_err(anyhow::Error::msg)? {
        return Ok(keys);
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no randomness for a key: {e}"))?;
    let key = RedactionKey::new("demo", secret.to_vec()).map_err(anyhow::Error::msg)?;
    Ok(RedactionKeys::new(key, []))
}
