//! `oncebox-bench deliver`: the delivery pipeline against the raw claim+complete cycle, and
//! AMQP delivery against a raw publisher-confirm loop.

use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_core::config::Config;
use oncebox_receiver::Receiver;
use oncebox_store::Intake;
use oncebox_store::scratch::ScratchDb;
use oncebox_worker::Routes;
use serde_json::json;
use sqlx::PgPool;

use crate::DeliverArgs;
use crate::baseline::{Scripts, pgbench_available};
use crate::cpu::{CpuReading, CpuUse};
use crate::harness::{Drain, Writes, drain_measured, noop_sink, wal_position, wal_since};
use crate::latency::{Offer, Rate};
use crate::queries;

impl DeliverArgs {
    /// `--baseline-rows`, or enough that the raw cycle does not run out within `--seconds`:
    /// it has completed up to 76,000 rows/s on the two-core machine the docs quote.
    fn baseline_rows(&self) -> u64 {
        self.baseline_rows
            .unwrap_or(self.seconds.saturating_mul(100_000).max(300_000))
    }

    /// `--concurrency`, or its default for the transport measured.
    fn concurrency(&self) -> u32 {
        let default = match self.amqp {
            true => 2 * CONFIRM_WINDOW as u32,
            false => 256,
        };
        self.concurrency.unwrap_or(default)
    }
}

/// Runs the delivery benchmark in a scratch database of its own.
pub(crate) async fn run(a: DeliverArgs, json_out: bool) -> anyhow::Result<()> {
    crate::in_scratch(&a.database_url, "deliver", async |scratch| {
        if a.amqp {
            measure_amqp(&a, scratch, json_out).await
        } else {
            measure(&a, scratch, json_out).await
        }
    })
    .await
}

async fn measure(a: &DeliverArgs, scratch: &ScratchDb, json_out: bool) -> anyhow::Result<()> {
    let (receiver, config) = noop_sink("", "").await?;
    let routes = Routes::from_config(&config, None)?;
    let pool = oncebox_store::connect_worker(&scratch.url, 24, Duration::from_secs(5)).await?;
    let intents = a.intents as usize;

    // 1. Throughput: drain a backlog; the WAL it wrote and the rows.
    let (drained, worker) =
        drain_measured(&pool, &routes, a.concurrency(), (intents, a.tenants), true).await?;
    let rate = intents as f64 / drained.seconds;
    anyhow::ensure!(
        receiver.effects().len() == intents,
        "backlog drained wrongly: {} effects for {intents} intents",
        receiver.effects().len()
    );
    if !json_out {
        eprintln!(
            "backlog: {} intents of {} tenant(s) delivered in {:.2} s",
            a.intents, drained.tenants, drained.seconds
        );
    }
    // 2. Latency at half that rate: paced submits, commit → arrival at the receiver.
    let intake = Intake::new(&config, None).context("the benchmark's actions hash nothing")?;
    let paced = paced_latency(&scratch.url, &intake, &receiver, rate / 2.0, a.seconds).await?;
    worker.stop().await?;
    // 3. The raw baseline: baseline/cycle.sql by pgbench over a filled backlog.
    let raw = raw_delivery_rps(a, scratch, &pool).await?;
    let report = HttpReport {
        drained,
        paced,
        raw,
    };
    match json_out {
        true => println!("{}", report.json(a)),
        false => report.print(a),
    }
    Ok(())
}

/// What [`measure`] found.
struct HttpReport {
    /// The backlog's drain.
    drained: Drain,
    /// Latency at half the drain's rate.
    paced: Paced,
    /// The raw cycle's rows per second and WAL bytes per row, when pgbench could run.
    raw: Option<(f64, f64)>,
}

impl HttpReport {
    /// Deliveries per second over the drain.
    fn rate(&self, a: &DeliverArgs) -> f64 {
        f64::from(a.intents) / self.drained.seconds
    }

    /// Deliveries per second between a tenth and nine tenths of the backlog.
    fn steady_rate(&self, a: &DeliverArgs) -> Option<f64> {
        self.drained.progress.steady_rate(a.intents as usize)
    }

    /// A per-delivery share of `total`.
    fn per_delivery(a: &DeliverArgs, total: f64) -> f64 {
        total / f64::from(a.intents)
    }

    /// Rows written per delivery over all tables.
    fn rows_per_delivery(&self, a: &DeliverArgs) -> f64 {
        let rows = self.drained.writes.values().map(Writes::rows).sum::<i64>();
        Self::per_delivery(a, rows as f64)
    }

    /// The report as the JSON line `--json` prints.
    fn json(&self, a: &DeliverArgs) -> serde_json::Value {
        let (d, rate) = (&self.drained, self.rate(a));
        let raw = self.raw.map(|r| r.0);
        json!({
            "benchmark": "deliver", "intents": a.intents, "tenants": self.drained.tenants, "concurrency": a.concurrency(),
            "deliveries_per_second": rate, "drain_seconds": d.seconds,
            "wal_bytes_per_delivery": Self::per_delivery(a, d.wal.bytes), "wal": d.wal,
            "rows_per_delivery": self.rows_per_delivery(a),
            "rows_by_table": d.writes, "cpu": d.cpu, "latency": self.paced,
            "raw_delivery_rps": raw, "raw_wal_bytes_per_row": self.raw.map(|r| r.1),
            "ratio_to_raw": raw.map(|r| rate / r),
            "progress": d.progress,
            "steady_deliveries_per_second": self.steady_rate(a),
            "steady_ratio_to_raw": raw.zip(self.steady_rate(a)).map(|(r, s)| s / r),
        })
    }

    /// The report as text.
    fn print(&self, a: &DeliverArgs) {
        let (d, rate) = (&self.drained, self.rate(a));
        let wal_per_intent = Self::per_delivery(a, d.wal.bytes);
        let rows_per_intent = self.rows_per_delivery(a);
        println!(
            "deliver: backlog of {} intents, one worker, concurrency {}",
            a.intents,
            a.concurrency()
        );
        println!("  oncebox deliveries/s (HTTP, key-honouring no-op receiver)  {rate:>9.0}");
        let p = d.progress;
        println!(
            "    first outcome after {:.0} ms; a tenth after {:.0} ms, nine tenths after {:.0} ms",
            p.first * 1e3,
            p.tenth * 1e3,
            p.nine_tenths * 1e3
        );
        if let Some(steady) = self.steady_rate(a) {
            println!("    between a tenth and nine tenths of the backlog            {steady:>9.0}");
        }
        println!(
            "  WAL written per delivery (bytes, whole drain)               {wal_per_intent:>9.0}"
        );
        println!(
            "    (WAL from {} to {}: pg_waldump --stats shows what)",
            d.wal.from, d.wal.to
        );
        println!(
            "  rows written per delivery (inserted + updated + deleted)    {rows_per_intent:>9.2}"
        );
        print_cpu(d.cpu);
        for (table, w) in &d.writes {
            let per = |n: i64| Self::per_delivery(a, n as f64);
            println!(
                "    {table:<16} per delivery: {:.2} inserted, {:.2} updated ({:.2} HOT), {:.2} deleted",
                per(w.inserted),
                per(w.updated),
                per(w.hot_updated),
                per(w.deleted)
            );
        }
        match self.raw {
            Some((r, raw_wal)) => {
                println!("  raw claim(100)+complete cycle, pgbench, 2 clients          {r:>9.0}");
                println!(
                    "  ratio oncebox / raw                                        {:>9.2}",
                    rate / r
                );
                if let Some(steady) = self.steady_rate(a) {
                    println!(
                        "    between a tenth and nine tenths of the backlog           {:>9.2}",
                        steady / r
                    );
                }
                println!(
                    "  raw cycle WAL per row (bytes)                             {raw_wal:>9.0}"
                );
            }
            None => println!("  (raw baseline skipped: pgbench or its scripts not found)"),
        }
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        let p = &self.paced;
        println!(
            "  end to end, offered {:.0}/s (half the drain), committed {:.0}/s, {} samples: \
             p50 {} ms, p99 {} ms; submit p50 {} ms",
            p.target_rate,
            p.achieved_rate,
            p.samples,
            ms(p.p50_ms),
            ms(p.p99_ms),
            ms(p.submit_p50_ms)
        );
    }
}

/// The drain's CPU lines (nothing without /proc).
fn print_cpu(cpu: Option<CpuUse>) {
    if let Some(c) = cpu {
        println!(
            "  machine CPU idle during the drain (%)                       {:>9.0}",
            c.idle_share * 100.0
        );
        println!(
            "  Postgres CPU per delivery (ms, whole drain)                 {:>9.3}",
            c.postgres_ms_per_unit
        );
        println!(
            "  this process's CPU per delivery (ms: worker and receiver)   {:>9.3}",
            c.process_ms_per_unit
        );
    }
}

/// End-to-end latency at a paced rate: what was offered, what the submitters committed, and
/// commit → arrival.
#[derive(Debug, serde::Serialize)]
struct Paced {
    target_rate: f64,
    /// Intents committed per second in the measured window: below `target_rate` when the
    /// submits themselves could not keep up beside the worker.
    achieved_rate: f64,
    samples: usize,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    /// The submit's own latency (begin to commit returned), p50, in milliseconds.
    submit_p50_ms: Option<f64>,
}

/// Submitters of the paced phase, each with its own connection, as an orchestrator's would be.
const PACED_SUBMITTERS: u32 = 32;

/// Submits at `target` intents/s for `seconds` after a second's warm-up (open loop, as `latency`
/// does: a late submitter does not skip its turn, but starts nothing after the window), through
/// a pool of its own beside the worker's, and measures each intent's commit → arrival at
/// `receiver` once all have arrived.
async fn paced_latency(
    url: &str,
    intake: &Intake,
    receiver: &Receiver,
    target: f64,
    seconds: u64,
) -> anyhow::Result<Paced> {
    let pool =
        oncebox_store::connect_worker(url, PACED_SUBMITTERS + 2, Duration::from_secs(5)).await?;
    let offer = Offer {
        warmup_ms: 1_000,
        seconds,
        min_samples: 0,
        submitters: PACED_SUBMITTERS,
        intent: crate::latency::noop_intents(),
    };
    crate::latency::settle(&pool, 1).await?;
    let p = crate::latency::one_point(
        &pool,
        intake,
        receiver,
        &offer,
        Rate::Fixed(target),
        "paced",
    )
    .await?;
    let finite = |v: f64| v.is_finite().then_some(v);
    Ok(Paced {
        target_rate: target,
        achieved_rate: p.achieved,
        samples: p.samples,
        p50_ms: finite(p.p50_ms),
        p99_ms: finite(p.p99_ms),
        submit_p50_ms: finite(p.submit_p50_ms),
    })
}

/// baseline.sh's delivery figure: fill a backlog, run cycle.sql with 2 pgbench clients for
/// `--seconds`, count the rows completed.
/// The raw cycle's rows per second and WAL bytes per row, or `None` without pgbench.
async fn raw_delivery_rps(
    a: &DeliverArgs,
    scratch: &ScratchDb,
    pool: &PgPool,
) -> anyhow::Result<Option<(f64, f64)>> {
    let scripts = Scripts::new(a.baseline.baseline_dir.as_deref())?;
    let (Some(setup), Some(fill), Some(cycle)) = (
        scripts.get("setup.sql"),
        scripts.get("fill.sql"),
        scripts.get("cycle.sql"),
    ) else {
        return Ok(None);
    };
    if !pgbench_available() {
        return Ok(None);
    }
    let psql = |file: std::path::PathBuf, vars: Vec<String>| {
        let mut c = tokio::process::Command::new("psql");
        c.args(["-q", "-X", &scratch.url, "-f"])
            .arg(file)
            .args(vars.iter().flat_map(|v| ["-v".to_owned(), v.clone()]));
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c.status()
    };
    psql(setup, vec![]).await.context("psql setup.sql")?;
    psql(fill, vec![format!("rows={}", a.baseline_rows())])
        .await
        .context("psql fill.sql")?;
    let count = || async {
        sqlx::query_scalar::<_, i64>(queries::BASELINE_LEFT)
            .fetch_one(pool)
            .await
    };
    let start = count().await?;
    let wal_start = wal_position(pool).await?;
    let out = tokio::process::Command::new("pgbench")
        .args(["-n", "-f"])
        .arg(&cycle)
        .args([
            "-c",
            "2",
            "-j",
            "2",
            "-T",
            &a.seconds.to_string(),
            &scratch.url,
        ])
        .output()
        .await
        .context("pgbench")?;
    anyhow::ensure!(
        out.status.success(),
        "pgbench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wal = wal_since(pool, &wal_start).await?;
    let left = count().await?;
    // A backlog drained before the end leaves pgbench claiming nothing for the rest of the
    // window, and the rate it gives is too low: no figure rather than a wrong one.
    anyhow::ensure!(
        left > 0,
        "the raw baseline completed all {} rows of its backlog within --seconds {}: raise --baseline-rows",
        a.baseline_rows(),
        a.seconds
    );
    let rows = (start - left).max(1) as f64;
    Ok(Some((rows / a.seconds as f64, wal / rows)))
}

/// Confirms allowed in flight, on both sides of the AMQP comparison.
const CONFIRM_WINDOW: usize = 256;

async fn measure_amqp(a: &DeliverArgs, scratch: &ScratchDb, json_out: bool) -> anyhow::Result<()> {
    use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::FieldTable;

    let queue = format!("{}.bench", scratch.name);
    let conn = lapin::Connection::connect(&a.amqp_url, lapin::ConnectionProperties::default())
        .await
        .context("cannot connect to AMQP_URL")?;
    let channel = conn.create_channel().await.context("channel")?;
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .context("queue")?;
    let config = Config::from_toml(&format!(
        "[actions.noop]\ndestination = \"bus\"\n[destinations.bus]\nkind = \"amqp\"\nexchange = \"\"\nrouting_key = \"{queue}\"\nidempotency = \"key\"\ntimeout = \"5s\"\nmax_unconfirmed = {CONFIRM_WINDOW}\n"
    ))?;
    let routes = Routes::from_config(&config, Some(&a.amqp_url))?;
    let pool = oncebox_store::connect_worker(&scratch.url, 24, Duration::from_secs(5)).await?;
    let intents = a.intents as usize;
    let (drain, worker) =
        drain_measured(&pool, &routes, a.concurrency(), (intents, a.tenants), false).await?;
    let ours = intents as f64 / drain.seconds;
    worker.stop().await?;

    let raw_start = CpuReading::now();
    let raw = raw_publish_rate(&channel, &queue, intents).await?;
    let raw_cpu = raw_start
        .zip(CpuReading::now())
        .map(|(a, b)| a.until(b, intents));
    if let Err(e) = channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
    {
        tracing::warn!(error = %e, %queue, "could not delete the benchmark's queue");
    }
    if let Err(e) = channel.close(200, "done".into()).await {
        tracing::debug!(error = %e, "closing the channel failed");
    }
    if let Err(e) = conn.close(200, "done".into()).await {
        tracing::debug!(error = %e, "closing the connection failed");
    }
    if json_out {
        println!(
            "{}",
            json!({"benchmark": "deliver-amqp", "intents": a.intents, "tenants": drain.tenants, "concurrency": a.concurrency(),
                   "confirm_window": CONFIRM_WINDOW,
                   "deliveries_per_second": ours, "cpu": drain.cpu, "raw_publish_confirm_per_second": raw,
                   "raw_cpu": raw_cpu, "ratio_to_raw": ours / raw})
        );
    } else {
        println!(
            "deliver --amqp: backlog of {} intents, one worker, concurrency {}, confirm window {CONFIRM_WINDOW}",
            a.intents,
            a.concurrency()
        );
        println!(
            "  {:<59}{ours:>9.0}",
            "oncebox deliveries/s (publisher confirms, persistent)"
        );
        print_cpu(drain.cpu);
        println!(
            "  {:<59}{raw:>9.0}",
            "raw lapin publisher-confirm loop, same message/window"
        );
        if let Some(c) = raw_cpu {
            println!(
                "  {:<59}{:>9.0}",
                "machine CPU idle during the raw loop (%)",
                c.idle_share * 100.0
            );
        }
        println!("  {:<59}{:>9.2}", "ratio oncebox / raw", ours / raw);
    }
    Ok(())
}

/// The raw loop: `n` messages with the same body and properties as oncebox's, persistent, at
/// most [`CONFIRM_WINDOW`] unconfirmed; messages per second.
async fn raw_publish_rate(channel: &lapin::Channel, queue: &str, n: usize) -> anyhow::Result<f64> {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .context("confirms")?;
    let body = br#"{"n":1}"#;
    let started = Instant::now();
    let mut pending: std::collections::VecDeque<lapin::PublisherConfirm> =
        std::collections::VecDeque::with_capacity(CONFIRM_WINDOW);
    for i in 0..n {
        let mut headers = FieldTable::default();
        for (k, v) in [
            ("Idempotency-Key", format!("raw-{i}")),
            ("X-Oncebox-Tenant", "bench".to_owned()),
            ("X-Oncebox-Action", "noop".to_owned()),
            ("X-Oncebox-Request-Hash", "0".repeat(64)),
            ("X-Oncebox-Attempt", "1".to_owned()),
        ] {
            headers.insert(
                ShortString::from(k),
                AMQPValue::LongString(LongString::from(v)),
            );
        }
        let props = lapin::BasicProperties::default()
            .with_message_id(format!("raw-{i}").into())
            .with_content_type("application/json".into())
            .with_delivery_mode(2)
            .with_headers(headers);
        if pending.len() == CONFIRM_WINDOW
            && let Some(oldest) = pending.pop_front()
        {
            oldest.await.context("confirm")?;
        }
        let confirm = channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                body,
                props,
            )
            .await
            .context("publish")?;
        pending.push_back(confirm);
    }
    for c in pending {
        c.await.context("confirm")?;
    }
    Ok(n as f64 / started.elapsed().as_secs_f64())
}
