//! `oncebox-bench latency`: end-to-end latency — a submit's commit to its request's arrival at
//! the reference receiver, over HTTP — at fixed offered rates and at saturation, with real
//! `oncebox worker` processes (1, then 2). Prints a table and draws the curve as a PNG.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_core::{IntentNames, NewIntent};
use oncebox_receiver::Receiver;
use oncebox_store::Intake;
use serde_json::json;
use sqlx::PgPool;
use tokio::process::{Child, Command};

use crate::LatencyArgs;
use crate::chart::{Chart, Series};
use crate::queries;
use crate::stats::percentile;

/// An offered load: a fixed rate, or as fast as the submitters go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Rate {
    /// Intents per second, paced (open loop: a late submitter does not skip its turn).
    Fixed(f64),
    /// Every submitter submits again as soon as its last commit returns.
    Saturation,
}

impl std::str::FromStr for Rate {
    type Err = String;
    fn from_str(s: &str) -> Result<Rate, String> {
        if s == "max" {
            return Ok(Rate::Saturation);
        }
        match s.parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 && r <= 1_000_000.0 => Ok(Rate::Fixed(r)),
            _ => Err(format!(
                "{s:?} is not a rate: give intents per second (above 0, at most 1000000) or \"max\""
            )),
        }
    }
}

/// One point of the curve.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Point {
    /// Worker processes.
    pub(crate) workers: u32,
    /// Offered intents/s; `None` at saturation.
    pub(crate) offered: Option<f64>,
    /// Intents committed per second in the measured window.
    pub(crate) achieved: f64,
    /// Seconds measured.
    pub(crate) seconds: f64,
    /// Intents measured.
    pub(crate) samples: usize,
    /// Latency percentiles and maximum, in milliseconds.
    pub(crate) p50_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    /// The submit's own latency (begin to commit returned), p50 and p99, in milliseconds: what
    /// waking workers costs the caller.
    pub(crate) submit_p50_ms: f64,
    pub(crate) submit_p99_ms: f64,
    /// WAL written per intent, submit to recorded outcome (the whole point, warm-up included).
    pub(crate) wal_bytes_per_intent: f64,
    /// CPU time the Postgres server's processes spent per intent, in milliseconds (Linux's
    /// /proc; `None` elsewhere).
    pub(crate) postgres_cpu_ms_per_intent: Option<f64>,
}

/// The `i`th intent of a point, given its key.
pub(crate) type IntentOf = Arc<dyn Fn(String, usize) -> NewIntent + Send + Sync>;

/// Intents of tenant `bench` for the action `noop`, the `i`th with the arguments `{"n": i}`.
pub(crate) fn noop_intents() -> IntentOf {
    Arc::new(|key, i| {
        NewIntent::new(
            IntentNames {
                tenant_id: "bench",
                idempotency_key: &key,
                action: "noop",
            },
            json!({"n": i}),
        )
    })
}

/// How one point is offered: its warm-up, its measured window, its submitters and what each
/// intent is.
#[derive(Clone)]
pub(crate) struct Offer {
    /// Milliseconds submitted at the point's rate before measuring starts.
    pub(crate) warmup_ms: u64,
    /// Seconds measured (longer at low rates, until `min_samples` intents).
    pub(crate) seconds: u64,
    pub(crate) min_samples: u32,
    /// Submitting tasks, each with one transaction per intent.
    pub(crate) submitters: u32,
    /// The point's `i`th intent, given its key.
    pub(crate) intent: IntentOf,
}

/// Runs the benchmark in a scratch database of its own.
pub(crate) async fn run(a: LatencyArgs, json_out: bool) -> anyhow::Result<()> {
    let bin = match &a.oncebox_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.with_file_name("oncebox"),
    };
    anyhow::ensure!(
        bin.is_file(),
        "--oncebox-bin: no oncebox binary at {} (build it: cargo build --release -p oncebox)",
        bin.display()
    );
    let font = std::fs::read(&a.font).with_context(|| {
        format!(
            "--font: cannot read {} (Debian: apt-get install fonts-dejavu-core)",
            a.font.display()
        )
    })?;
    let points = crate::in_scratch(&a.database_url, "latency", async |scratch| {
        measure(&a, &bin, &scratch.url).await
    })
    .await?;
    let chart = chart_of(&points, a.seconds);
    crate::chart::draw(&chart, &a.chart, font).context("--chart")?;
    if json_out {
        println!(
            "{}",
            json!({"benchmark": "latency", "seconds_per_point": a.seconds, "points": points,
                   "chart": a.chart})
        );
        return Ok(());
    }
    print_table(&a, &points);
    println!("chart: {}", a.chart.display());
    Ok(())
}

fn print_table(a: &LatencyArgs, points: &[Point]) {
    println!(
        "latency: submit commit -> arrival at the receiver (HTTP); per point at least {} s and {} \
         intents after {} ms of warm-up; {} submitters",
        a.seconds, a.min_samples, a.warmup_ms, a.submitters
    );
    println!(
        "  {:>7} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>15} {:>9} {:>13}",
        "workers",
        "offered/s",
        "achieved/s",
        "samples",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "submit p50/p99",
        "WAL B/int",
        "PG cpu ms/int"
    );
    for p in points {
        let offered = p.offered.map_or("max".to_owned(), |r| format!("{r:.0}"));
        let cpu = p
            .postgres_cpu_ms_per_intent
            .map_or("-".to_owned(), |c| format!("{c:.3}"));
        println!(
            "  {:>7} {:>9} {:>10.0} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>15} {:>9.0} {:>13}",
            p.workers,
            offered,
            p.achieved,
            p.samples,
            p.p50_ms,
            p.p90_ms,
            p.p99_ms,
            p.max_ms,
            format!("{:.2}/{:.2}", p.submit_p50_ms, p.submit_p99_ms),
            p.wal_bytes_per_intent,
            cpu
        );
    }
}

async fn measure(a: &LatencyArgs, bin: &Path, url: &str) -> anyhow::Result<Vec<Point>> {
    let receiver = crate::harness::noop_receiver().await?;
    let toml = crate::harness::sink_toml(&receiver.url(), "", "");
    let config = oncebox_core::config::Config::from_toml(&toml)?;
    let config_file =
        std::env::temp_dir().join(format!("oncebox-bench-latency-{}.toml", std::process::id()));
    std::fs::write(&config_file, toml).context("writing the worker config")?;
    let intake = Intake::new(&config, None).context("the benchmark's actions hash nothing")?;
    let pool = oncebox_store::connect_worker(url, a.submitters + 4, Duration::from_secs(5)).await?;
    let offer = Offer {
        warmup_ms: a.warmup_ms,
        seconds: a.seconds,
        min_samples: a.min_samples,
        submitters: a.submitters,
        intent: noop_intents(),
    };
    let mut points = Vec::new();
    for &workers in &a.workers {
        let mut procs = Workers::start(bin, url, &config_file, workers, a)?;
        for (n, &rate) in a.rates.iter().enumerate() {
            procs.check()?;
            settle(&pool, workers).await?;
            let tag = format!("w{workers}-{n}");
            let point = one_point(&pool, &intake, &receiver, &offer, rate, &tag).await?;
            eprintln!(
                "  {workers} worker(s), {}: p50 {:.2} ms, p99 {:.2} ms",
                point_label(rate),
                point.p50_ms,
                point.p99_ms
            );
            points.push(Point { workers, ..point });
        }
        procs.stop().await?;
    }
    let _ = std::fs::remove_file(&config_file);
    Ok(points)
}

fn point_label(rate: Rate) -> String {
    match rate {
        Rate::Fixed(r) => format!("{r:.0}/s"),
        Rate::Saturation => "saturation".into(),
    }
}

/// Waits until the outbox is empty, vacuums, and waits until every worker is idle and listening:
/// each point starts from the same state.
pub(crate) async fn settle(pool: &PgPool, workers: u32) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    crate::harness::outbox_drained(pool, Duration::from_millis(20)).await?;
    crate::harness::run_script(pool, queries::BETWEEN_POINTS).await?;
    loop {
        let waiting: i64 = sqlx::query_scalar(queries::WAITING_WORKERS)
            .fetch_one(pool)
            .await?;
        if waiting >= i64::from(workers) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {waiting} of {workers} workers registered as waiting"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// When one point's submitters submit: from `start`, measured from `measured_from`, until `end`.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    rate: Rate,
    start: tokio::time::Instant,
    measured_from: tokio::time::Instant,
    end: tokio::time::Instant,
    submitters: usize,
}

/// What one submitter did: the intents committed from the start of the measured window with
/// their commit instants (the last may commit just after its end), their submit latencies in
/// milliseconds, how many it committed within the window, and how many in all.
type Submitted = (Vec<(String, Instant)>, Vec<f64>, usize, usize);

/// Submitter `s` of `schedule`: intents s, s + submitters, … each in its own transaction, at
/// its due time (or at once, at saturation), until the window's end. One running late does not
/// skip its turn, but it starts nothing after the end: offered more than it can commit, it
/// measures what it could, instead of submitting its arrears for as long again.
async fn submitter(
    pool: PgPool,
    intake: Intake,
    (tag, intent): (String, IntentOf),
    s: usize,
    schedule: Schedule,
) -> anyhow::Result<Submitted> {
    let (mut committed, mut submits, mut within, mut all) = (Vec::new(), Vec::new(), 0, 0);
    let mut i = s;
    loop {
        if let Rate::Fixed(r) = schedule.rate {
            let due = schedule.start + Duration::from_secs_f64(i as f64 / r);
            if due >= schedule.end {
                break;
            }
            tokio::time::sleep_until(due).await;
        }
        if tokio::time::Instant::now() >= schedule.end {
            break;
        }
        let new = intent(format!("lat-{tag}-{i}"), i);
        // What the receiver will see it as.
        let key = oncebox_core::delivery_key(&new.tenant_id, &new.idempotency_key);
        let began = tokio::time::Instant::now();
        let mut tx = pool.begin().await?;
        intake.submit(&mut tx, new).await?;
        tx.commit().await?;
        let at = tokio::time::Instant::now();
        all += 1;
        if at >= schedule.measured_from {
            within += usize::from(at < schedule.end);
            committed.push((key, at.into_std()));
            submits.push((at - began).as_secs_f64() * 1000.0);
        }
        i += schedule.submitters;
    }
    Ok((committed, submits, within, all))
}

/// Waits until every key of `committed` has arrived at `receiver`; their arrival instants.
async fn arrivals(
    receiver: &Receiver,
    committed: &[(String, Instant)],
) -> anyhow::Result<HashMap<String, Instant>> {
    let wanted: std::collections::HashSet<&str> = committed.iter().map(|(k, _)| &**k).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let seen: HashMap<String, Instant> = receiver
            .seen()
            .into_iter()
            .filter(|s| s.executed && wanted.contains(&*s.key))
            .map(|s| (s.key, s.at))
            .collect();
        if seen.len() == wanted.len() {
            return Ok(seen);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{} of {} intents arrived within 2 minutes",
            seen.len(),
            wanted.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Submits at `rate` for the warm-up and the measured seconds, from `offer.submitters` tasks
/// each with its own transaction per intent; measures the intents committed after the warm-up,
/// once all arrived, and the WAL and Postgres CPU of the whole point once every outcome is
/// recorded.
pub(crate) async fn one_point(
    pool: &PgPool,
    intake: &Intake,
    receiver: &Receiver,
    offer: &Offer,
    rate: Rate,
    tag: &str,
) -> anyhow::Result<Point> {
    let start = tokio::time::Instant::now() + Duration::from_millis(20);
    let measured_from = start + Duration::from_millis(offer.warmup_ms);
    let seconds = measured_seconds(rate, offer.seconds, offer.min_samples);
    let schedule = Schedule {
        rate,
        start,
        measured_from,
        end: measured_from + Duration::from_secs_f64(seconds),
        submitters: offer.submitters as usize,
    };
    let wal_start = crate::harness::wal_position(pool).await?;
    let cpu_start = crate::cpu::CpuReading::now();
    let tasks: Vec<_> = (0..schedule.submitters)
        .map(|s| {
            let (pool, intake) = (pool.clone(), intake.clone());
            let what = (tag.to_owned(), offer.intent.clone());
            tokio::spawn(submitter(pool, intake, what, s, schedule))
        })
        .collect();
    let (mut committed, mut submits, mut within, mut all) = (Vec::new(), Vec::new(), 0, 0);
    for t in tasks {
        let (c, s, w, n) = t.await.context("submitter panicked")??;
        committed.extend(c);
        submits.extend(s);
        within += w;
        all += n;
    }
    submits.sort_by(f64::total_cmp);
    let arrivals = arrivals(receiver, &committed).await?;
    // Every outcome recorded: the WAL and CPU of whole intents.
    crate::harness::outbox_drained(pool, Duration::from_millis(20)).await?;
    let wal = crate::harness::wal_since(pool, &wal_start).await?;
    let cpu = cpu_start
        .zip(crate::cpu::CpuReading::now())
        .map(|(a, b)| a.until(b, all).postgres_ms_per_unit);
    let mut ms: Vec<f64> = committed
        .iter()
        .map(|(k, t)| arrivals[k].saturating_duration_since(*t).as_secs_f64() * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| percentile(&ms, q).unwrap_or(f64::NAN);
    Ok(Point {
        workers: 0,
        offered: match rate {
            Rate::Fixed(r) => Some(r),
            Rate::Saturation => None,
        },
        achieved: within as f64 / seconds,
        seconds,
        samples: ms.len(),
        p50_ms: p(0.5),
        p90_ms: p(0.9),
        p99_ms: p(0.99),
        max_ms: p(1.0),
        submit_p50_ms: percentile(&submits, 0.5).unwrap_or(f64::NAN),
        submit_p99_ms: percentile(&submits, 0.99).unwrap_or(f64::NAN),
        wal_bytes_per_intent: wal / all.max(1) as f64,
        postgres_cpu_ms_per_intent: cpu,
    })
}

/// Seconds to measure at `rate`: `seconds`, or longer when that would give fewer than
/// `min_samples` intents (a p99 of 50 samples is its maximum).
fn measured_seconds(rate: Rate, seconds: u64, min_samples: u32) -> f64 {
    match rate {
        Rate::Fixed(r) => (seconds as f64).max(f64::from(min_samples) / r),
        Rate::Saturation => seconds as f64,
    }
}

/// The worker processes of one run.
struct Workers {
    children: Vec<Child>,
}

impl Workers {
    /// Starts `n` `oncebox worker` processes on `url` with the configuration `config`.
    fn start(
        bin: &Path,
        url: &str,
        config: &Path,
        n: u32,
        a: &LatencyArgs,
    ) -> anyhow::Result<Workers> {
        let mut children = Vec::new();
        for w in 0..n {
            let child = Command::new(bin)
                .arg("worker")
                .arg("--config")
                .arg(config)
                .args(["--id", &format!("latency-{w}")])
                .args(["--concurrency", &a.concurrency.to_string()])
                .args(["--lease", "10s", "--grace", "2s"])
                .args(&a.worker_args)
                .env("DATABASE_URL", url)
                .env("ONCEBOX_LOG", "warn")
                .env_remove("AMQP_URL")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?;
            children.push(child);
        }
        Ok(Workers { children })
    }

    /// Fails when a worker has exited.
    fn check(&mut self) -> anyhow::Result<()> {
        for c in &mut self.children {
            if let Some(status) = c.try_wait()? {
                anyhow::bail!("a worker process exited: {status}");
            }
        }
        Ok(())
    }

    /// SIGTERM to each, then waits for all to exit.
    async fn stop(mut self) -> anyhow::Result<()> {
        for c in &self.children {
            if let Some(pid) = c.id() {
                Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status()
                    .await
                    .context("kill -TERM")?;
            }
        }
        for c in &mut self.children {
            let status = tokio::time::timeout(Duration::from_secs(10), c.wait())
                .await
                .context("a worker did not stop within 10 s of SIGTERM")??;
            anyhow::ensure!(status.success(), "a worker exited with {status}");
        }
        Ok(())
    }
}

/// One percentile's line: the fixed-rate points, and the saturation point.
type Line = (Vec<(f64, f64)>, Option<(f64, f64)>);

/// The chart of `points`: p50 and p99 against offered load, one pair of lines per worker count;
/// saturation points are placed at their achieved rate.
fn chart_of(points: &[Point], seconds: u64) -> Chart {
    let mut series = Vec::new();
    let mut counts: Vec<u32> = points.iter().map(|p| p.workers).collect();
    counts.dedup();
    for w in counts {
        let mine: Vec<&Point> = points.iter().filter(|p| p.workers == w).collect();
        let of = |q: fn(&Point) -> f64| -> Line {
            let mut line: Vec<(f64, f64)> = mine
                .iter()
                .filter_map(|p| p.offered.map(|r| (r, q(p))))
                .collect();
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            let saturation = mine
                .iter()
                .find(|p| p.offered.is_none())
                .map(|p| (p.achieved, q(p)));
            (line, saturation)
        };
        let plural = if w == 1 { "" } else { "s" };
        for (name, tail, q) in [
            ("p50", false, (|p: &Point| p.p50_ms) as fn(&Point) -> f64),
            ("p99", true, |p: &Point| p.p99_ms),
        ] {
            let (points, saturation) = of(q);
            series.push(Series {
                label: format!("{name}, {w} worker{plural}"),
                points,
                saturation,
                workers: w,
                tail,
            });
        }
    }
    Chart {
        title: format!(
            "oncebox end-to-end latency: submit commit -> arrival at the HTTP receiver ({seconds} s+ per point)"
        ),
        series,
        goals: GOALS.to_vec(),
        x_desc: "offered load, intents/s (saturation: at the rate achieved)",
        y_desc: "milliseconds, commit to arrival",
    }
}

/// The latency goals on the 2-core machine (docs/capacity.md): (offered/s, percentile label, milliseconds).
pub(crate) const GOALS: [(f64, &str, f64); 7] = [
    (10.0, "p50", 1.5),
    (10.0, "p99", 5.0),
    (100.0, "p50", 1.5),
    (100.0, "p99", 5.0),
    (1000.0, "p50", 3.0),
    (1000.0, "p99", 15.0),
    (2000.0, "p99", 30.0),
];
