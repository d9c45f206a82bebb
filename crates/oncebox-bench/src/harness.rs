//! The benchmarks' harness: a worker run in-process with its counters, a backlog drained and
//! measured (WAL, CPU, rows written), the no-op receiver and its configuration, and the waits a
//! drain needs. A leaf: every benchmark uses it, it uses none of them.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_core::config::Config;
use oncebox_core::duration::NonZeroDuration;
use oncebox_receiver::{Receiver, ReceiverConfig};
use oncebox_worker::{Metrics, Routes, WorkerSettings};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::cpu::{CpuReading, CpuUse};
use crate::queries;

/// A worker running in-process, with its counters.
pub(crate) struct Running {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), oncebox_worker::WorkerError>>,
    metrics: Arc<Metrics>,
}

pub(crate) async fn start_worker(pool: &PgPool, routes: &Routes, concurrency: u32) -> Running {
    let cancel = CancellationToken::new();
    let settings = WorkerSettings {
        id: "bench".into(),
        concurrency: NonZeroUsize::new(concurrency as usize).unwrap_or(NonZeroUsize::MIN),
        lease: NonZeroDuration::from_secs(10),
        poll_interval: NonZeroDuration::from_millis(50),
        grace: Duration::from_secs(2),
        ..WorkerSettings::default()
    };
    let metrics = Arc::new(Metrics::default());
    let task = tokio::spawn(oncebox_worker::run(
        pool.clone(),
        routes.clone(),
        settings,
        metrics.clone(),
        cancel.clone(),
    ));
    Running {
        cancel,
        task,
        metrics,
    }
}

impl Running {
    /// Fails when the worker has already stopped (its error, or a panic).
    pub(crate) async fn check_alive(self) -> anyhow::Result<Running> {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if self.task.is_finished() {
            self.task.await.context("worker panicked")??;
            anyhow::bail!("the worker stopped at once");
        }
        Ok(self)
    }

    /// Waits until the worker has an outcome for `n` deliveries, by its own counters, looking
    /// every millisecond: it asks Postgres nothing, so it takes no database CPU from the drain it
    /// watches (a `count(*)` of the outbox every few milliseconds did). Outcomes are counted
    /// before they are recorded: [`outbox_drained`] confirms the end. Returns when the first
    /// outcome, a tenth and nine tenths of them were counted, measured from `since`. Fails if the
    /// worker stops, or delivers nothing for 2 minutes.
    pub(crate) async fn delivered(&self, n: u64, since: Instant) -> anyhow::Result<Progress> {
        let marks = [1, n.div_ceil(10).max(1), (n * 9).div_ceil(10).max(1)];
        let reached = std::cell::RefCell::new([None::<f64>; 3]);
        until_none_left("deliveries to make", Duration::from_millis(1), || async {
            anyhow::ensure!(!self.task.is_finished(), "the worker stopped mid-drain");
            let made = self.metrics.deliveries_total();
            for (at, mark) in reached.borrow_mut().iter_mut().zip(marks) {
                if at.is_none() && made >= mark {
                    *at = Some(since.elapsed().as_secs_f64());
                }
            }
            Ok(n.saturating_sub(made))
        })
        .await?;
        let [first, tenth, nine_tenths] = reached.into_inner().map(Option::unwrap_or_default);
        Ok(Progress {
            first,
            tenth,
            nine_tenths,
        })
    }

    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.cancel.cancel();
        Ok(self.task.await.context("worker panicked")??)
    }
}

/// Fills a backlog of `n` intents for the action `noop`, starts a worker and waits until the
/// outbox is empty; checks every intent succeeded. Returns the drain time and the worker.
pub(crate) async fn drain_backlog(
    pool: &PgPool,
    routes: &Routes,
    concurrency: u32,
    n: usize,
) -> anyhow::Result<(f64, Running)> {
    let (drain, worker) = drain_measured(pool, routes, concurrency, (n, 1), false).await?;
    Ok((drain.seconds, worker))
}

/// Rows written to one table: inserted, updated (of which HOT: no index entry written), deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, serde::Serialize)]
pub(crate) struct Writes {
    pub(crate) inserted: i64,
    pub(crate) updated: i64,
    pub(crate) hot_updated: i64,
    pub(crate) deleted: i64,
}

impl Writes {
    /// Rows written: inserted + updated + deleted.
    pub(crate) fn rows(&self) -> i64 {
        self.inserted + self.updated + self.deleted
    }
}

/// Rows written so far, per oncebox table.
async fn table_writes(pool: &PgPool) -> anyhow::Result<BTreeMap<String, Writes>> {
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(queries::TABLE_WRITES)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(t, inserted, updated, hot_updated, deleted)| {
            let w = Writes {
                inserted,
                updated,
                hot_updated,
                deleted,
            };
            (t, w)
        })
        .collect())
}

/// The rows written per table since `before`, once the statistics count `n` of what `count`
/// takes from `table` (each backend reports its counts up to ten seconds late); after 15 s,
/// what they count then, with a warning.
async fn writes_since(
    pool: &PgPool,
    before: &BTreeMap<String, Writes>,
    n: usize,
    (table, count): (&str, fn(&Writes) -> i64),
) -> anyhow::Result<BTreeMap<String, Writes>> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = table_writes(pool).await?;
        let diff: BTreeMap<String, Writes> = now
            .iter()
            .map(|(t, w)| {
                let b = before.get(t).copied().unwrap_or_default();
                let d = Writes {
                    inserted: w.inserted - b.inserted,
                    updated: w.updated - b.updated,
                    hot_updated: w.hot_updated - b.hot_updated,
                    deleted: w.deleted - b.deleted,
                };
                (t.clone(), d)
            })
            .filter(|(_, d)| d.rows() > 0)
            .collect();
        let seen = diff.get(table).map_or(0, count);
        if seen >= n as i64 {
            return Ok(diff);
        }
        if Instant::now() > deadline {
            eprintln!("row counts incomplete: the statistics show {seen} of {n} rows of {table}");
            return Ok(diff);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The WAL a phase wrote: bytes, and the positions around it (for `pg_waldump --stats`).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Wal {
    pub(crate) bytes: f64,
    pub(crate) from: String,
    pub(crate) to: String,
}

/// When a drain's worker, started at 0, had counted its first outcome, a tenth and nine tenths
/// of them (seconds, to the millisecond at which it was looked at).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct Progress {
    /// The first outcome: the worker's start-up, its first claim and its first call.
    pub(crate) first: f64,
    /// A tenth of the outcomes.
    pub(crate) tenth: f64,
    /// Nine tenths of them.
    pub(crate) nine_tenths: f64,
}

impl Progress {
    /// Outcomes per second between a tenth and nine tenths of `n`: the rate once every
    /// connection is open and before the last calls and records trail off, as a raw loop that
    /// starts with its connections open measures; `None` when the window is too short to time.
    pub(crate) fn steady_rate(&self, n: usize) -> Option<f64> {
        let window = self.nine_tenths - self.tenth;
        (window >= 0.05).then(|| 0.8 * n as f64 / window)
    }
}

/// What [`drain_measured`] found, beside the worker it leaves running.
pub(crate) struct Drain {
    /// From the worker's start until the outbox was empty.
    pub(crate) seconds: f64,
    /// When its outcomes were counted.
    pub(crate) progress: Progress,
    /// Tenants with ready work when the worker started, counted in the outbox.
    pub(crate) tenants: i64,
    /// The WAL written meanwhile.
    pub(crate) wal: Wal,
    /// Rows written per table (empty unless asked for).
    pub(crate) writes: BTreeMap<String, Writes>,
    /// The machine's idle share and Postgres's CPU per delivery meanwhile (Linux only).
    pub(crate) cpu: Option<CpuUse>,
}

/// Writes a backlog of `n` ready intents directly with SQL, spread over `tenants` tenants and
/// `actions` actions (`noop` when one, `noop-0`… otherwise): what a drain is measured on. The
/// connection that wrote them reports its rows to the statistics as soon as it is idle (a
/// session flushes them at most once a second while busy, and otherwise only after ten seconds
/// idle), so that a drain waiting to count its rows from them starts at once.
pub(crate) async fn fill_backlog(
    pool: &PgPool,
    n: usize,
    (tenants, actions): (u32, u32),
) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    sqlx::query(queries::BACKLOG)
        .bind(i64::try_from(n).unwrap_or(i64::MAX))
        .bind(i64::from(tenants))
        .bind(i64::from(actions))
        .execute(&mut *conn)
        .await?;
    sqlx::query(queries::FLUSH_STATISTICS)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Fresh statistics and a checkpoint after a fill, before a clock starts.
pub(crate) async fn settle(pool: &PgPool) -> anyhow::Result<()> {
    run_script(pool, queries::SETTLE).await
}

/// [`drain_backlog`] of `n` intents over `tenants` tenants, also returning the WAL the drain wrote — the server's WAL position before
/// the worker starts and once the outbox is empty (the whole cluster's WAL: nothing else should
/// run meanwhile) — the CPU it used, and, with `count_rows`, the rows it wrote per table
/// (waiting for the statistics of the backlog's fill before starting the worker, and for the
/// drain's after, read once that worker has stopped; the worker returned is then a fresh one).
pub(crate) async fn drain_measured(
    pool: &PgPool,
    routes: &Routes,
    concurrency: u32,
    (n, tenants): (usize, u32),
    count_rows: bool,
) -> anyhow::Result<(Drain, Running)> {
    let before_fill = table_writes(pool).await?;
    fill_backlog(pool, n, (tenants, 1)).await?;
    settle(pool).await?;
    let at_start = match count_rows {
        true => {
            writes_since(pool, &before_fill, n, ("intents", |w| w.inserted)).await?;
            Some(table_writes(pool).await?)
        }
        false => None,
    };
    drain_settled(pool, routes, concurrency, n, at_start).await
}

/// Drains the `n` intents already in the outbox (filled and settled) with a worker started now,
/// measuring as [`drain_measured`] does; with `rows_at_start`, also the rows written since.
pub(crate) async fn drain_settled(
    pool: &PgPool,
    routes: &Routes,
    concurrency: u32,
    n: usize,
    rows_at_start: Option<BTreeMap<String, Writes>>,
) -> anyhow::Result<(Drain, Running)> {
    let ready_tenants: i64 = sqlx::query_scalar(queries::READY_TENANTS)
        .fetch_one(pool)
        .await?;
    let succeeded_before: i64 = sqlx::query_scalar(queries::SUCCEEDED)
        .fetch_one(pool)
        .await?;
    let wal_start = wal_position(pool).await?;
    let cpu_start = CpuReading::now();
    let started = Instant::now();
    let worker = start_worker(pool, routes, concurrency).await;
    let progress = worker.delivered(n as u64, started).await?;
    outbox_drained(pool, Duration::from_millis(2)).await?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_start.zip(CpuReading::now()).map(|(a, b)| a.until(b, n));
    let wal = Wal {
        bytes: wal_since(pool, &wal_start).await?,
        from: wal_start,
        to: wal_position(pool).await?,
    };
    let succeeded: i64 = sqlx::query_scalar::<_, i64>(queries::SUCCEEDED)
        .fetch_one(pool)
        .await?
        - succeeded_before;
    anyhow::ensure!(
        succeeded == n as i64,
        "backlog drained wrongly: {succeeded} of {n} intents succeeded"
    );
    let (writes, worker) = match rows_at_start {
        Some(at_start) => {
            // The rows are counted from the statistics, which a session reports once a second
            // while busy but only ten seconds after it falls idle, as the worker's do once the
            // backlog is gone; a session that closes reports them at once. So the worker stops
            // before they are read, and a fresh one takes its place.
            worker.stop().await?;
            let writes = writes_since(pool, &at_start, n, ("outbox", |w| w.deleted)).await?;
            (writes, start_worker(pool, routes, concurrency).await)
        }
        None => (BTreeMap::new(), worker),
    };
    let drain = Drain {
        seconds,
        progress,
        tenants: ready_tenants,
        wal,
        writes,
        cpu,
    };
    Ok((drain, worker))
}

/// Outbox rows left.
pub(crate) async fn outbox_left(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(queries::OUTBOX_LEFT)
        .fetch_one(pool)
        .await?)
}

/// Waits until the outbox is empty — every outcome recorded — looking every `every`; fails when
/// it stops shrinking for 2 minutes.
pub(crate) async fn outbox_drained(pool: &PgPool, every: Duration) -> anyhow::Result<()> {
    until_none_left("outbox rows left", every, || async {
        Ok(u64::try_from(outbox_left(pool).await?).unwrap_or(0))
    })
    .await
}

/// Asks `left` every `every` until it answers 0; fails on its error, or when it has not gone
/// down for 2 minutes (then naming `what` and how many are left).
async fn until_none_left<F, Fut>(what: &str, every: Duration, mut left: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<u64>>,
{
    let (mut fewest, mut since) = (u64::MAX, Instant::now());
    loop {
        let now_left = left().await?;
        if now_left == 0 {
            return Ok(());
        }
        if now_left < fewest {
            (fewest, since) = (now_left, Instant::now());
        }
        anyhow::ensure!(
            since.elapsed() < Duration::from_secs(120),
            "{now_left} {what}, none for 2 minutes"
        );
        tokio::time::sleep(every).await;
    }
}

/// The server's WAL insert position, as text.
pub(crate) async fn wal_position(pool: &PgPool) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar(queries::WAL_POSITION)
        .fetch_one(pool)
        .await?)
}

/// WAL bytes written since the position `from` (the whole cluster's).
pub(crate) async fn wal_since(pool: &PgPool, from: &str) -> anyhow::Result<f64> {
    Ok(sqlx::query_scalar(queries::WAL_SINCE)
        .bind(from)
        .fetch_one(pool)
        .await?)
}

/// A fresh key-honouring no-op receiver — every key a first effect, never a replay — and a
/// configuration whose action `noop` delivers to it over HTTP: `action_extra` goes into the
/// action's table, `sink_extra` into the destination's.
pub(crate) async fn noop_sink(
    action_extra: &str,
    sink_extra: &str,
) -> anyhow::Result<(Receiver, Config)> {
    let receiver = noop_receiver().await?;
    let config = Config::from_toml(&sink_toml(&receiver.url(), action_extra, sink_extra))?;
    Ok((receiver, config))
}

/// A fresh key-honouring no-op receiver.
pub(crate) async fn noop_receiver() -> anyhow::Result<Receiver> {
    Receiver::start(ReceiverConfig {
        honours_keys: true,
        keep_no_bodies: true,
        keep_no_history: false,
        ..ReceiverConfig::default()
    })
    .await
    .context("receiver")
}

/// The configuration text of [`noop_sink`] for a receiver at `url`.
pub(crate) fn sink_toml(url: &str, action_extra: &str, sink_extra: &str) -> String {
    format!(
        "[actions.noop]\ndestination = \"sink\"\n{action_extra}[destinations.sink]\n\
         kind = \"http\"\nurl = \"{url}\"\nidempotency = \"key\"\ntimeout = \"5s\"\n{sink_extra}"
    )
}

/// Runs each statement of `script` on its own (VACUUM cannot run inside the implicit
/// transaction of a multi-statement query), on one connection without a statement timeout (a
/// VACUUM of a large table outlasts the pool's); comment-only pieces are skipped.
pub(crate) async fn run_script(pool: &PgPool, script: &str) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    sqlx::raw_sql("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    for statement in script
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty() && !s.lines().all(|l| l.starts_with("--")))
    {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned()))
            .execute(&mut *conn)
            .await?;
    }
    sqlx::raw_sql("RESET statement_timeout")
        .execute(&mut *conn)
        .await?;
    Ok(())
}
