//! `oncebox-bench scale`: how the cost per intent grows along one axis of the work — the
//! journal kept for retention, the backlog, tenants with ready work, ordering lanes,
//! destinations — each size in a scratch database of its own, sizes alternating round by round.
//! At each size: submit p50/p99 (one intent per transaction, through the library), the claim
//! statement's time, then a drain by one in-process worker into the no-op receiver (rate, WAL
//! and Postgres CPU per delivery). Printed as a table (or JSON) and drawn as a PNG.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncebox_core::config::Config;
use oncebox_core::{IntentNames, NewIntent};
use oncebox_store::{Intake, Phase, TenantCursor};
use oncebox_worker::Routes;
use serde_json::json;
use sqlx::PgPool;

use crate::ScaleArgs;
use crate::chart::{Chart, Series};
use crate::harness::{drain_settled, fill_backlog, noop_receiver, settle, sink_toml};
use crate::latency::{Offer, Rate};
use crate::queries;

/// The axis a scale run grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Axis {
    /// Terminal intents kept in the journal for retention, beside the same backlog.
    Journal,
    /// Ready intents in the backlog, of one tenant.
    Backlog,
    /// Tenants the same backlog is spread over, each with ready work.
    Tenants,
    /// Ordering lanes: the backlog submitted with ordering keys over this many lanes (at most
    /// one per intent; the rest of the lane table idle lanes with a past).
    Lanes,
    /// Destinations, each with a circuit breaker and a rate limit, the backlog spread over
    /// one action per destination.
    Destinations,
}

impl Axis {
    /// The axis's name in reports and file names.
    fn name(self) -> &'static str {
        match self {
            Axis::Journal => "journal",
            Axis::Backlog => "backlog",
            Axis::Tenants => "tenants",
            Axis::Lanes => "lanes",
            Axis::Destinations => "destinations",
        }
    }

    /// What the axis counts, for the chart.
    fn description(self) -> &'static str {
        match self {
            Axis::Journal => "intents in the journal (terminal ones kept, and the backlog)",
            Axis::Backlog => "ready intents in the backlog",
            Axis::Tenants => "tenants with ready work",
            Axis::Lanes => "ordering lanes",
            Axis::Destinations => "destinations (breaker and rate limit each)",
        }
    }

    /// The sizes measured when `--sizes` is not given.
    pub(crate) fn default_sizes(self) -> Vec<u32> {
        match self {
            Axis::Journal => vec![0, 1_000_000, 10_000_000],
            Axis::Backlog => vec![20_000, 200_000, 1_000_000],
            Axis::Tenants => vec![1, 100, 1_000, 10_000],
            Axis::Lanes => vec![10, 1_000, 100_000],
            Axis::Destinations => vec![1, 100, 1_000],
        }
    }
}

/// How one size's backlog is spread: over tenants, actions (one destination each) and lanes.
#[derive(Debug, Clone, Copy)]
struct Spread {
    intents: u32,
    tenants: u32,
    actions: u32,
    /// Ordering lanes the backlog is submitted over; 0: no ordering keys.
    lanes: u32,
}

impl Spread {
    fn of(axis: Axis, size: u32, intents: u32) -> Spread {
        let flat = Spread {
            intents,
            tenants: 1,
            actions: 1,
            lanes: 0,
        };
        match axis {
            Axis::Journal => flat,
            Axis::Backlog => Spread {
                intents: size,
                ..flat
            },
            Axis::Tenants => Spread {
                tenants: size,
                ..flat
            },
            Axis::Lanes => Spread {
                lanes: size.min(intents),
                ..flat
            },
            Axis::Destinations => Spread {
                actions: size,
                ..flat
            },
        }
    }

    /// The `i`th intent of the spread: its tenant, action and ordering key, as the backlog's
    /// SQL names them.
    fn intent(&self, key: String, i: u32) -> NewIntent {
        let tenant = match self.tenants {
            1 => "bench".to_owned(),
            t => format!("bench-{}", i % t),
        };
        let action = match self.actions {
            1 => "noop".to_owned(),
            n => format!("noop-{}", i % n),
        };
        NewIntent {
            ordering_key: (self.lanes > 0).then(|| format!("lane-{}", i % self.lanes)),
            ..NewIntent::new(
                IntentNames {
                    tenant_id: &tenant,
                    idempotency_key: &key,
                    action: &action,
                },
                json!({"n": i}),
            )
        }
    }
}

/// The configuration of one size: action `noop` (or `noop-0`… one per destination) delivering
/// over HTTP to the receiver at `url`; along the destinations axis, each destination with a
/// breaker and a rate limit high enough never to hold a delivery back.
fn config_text(axis: Axis, spread: &Spread, url: &str) -> String {
    if axis != Axis::Destinations {
        return sink_toml(url, "", "");
    }
    let name = |i: u32| match spread.actions {
        1 => "noop".to_owned(),
        _ => format!("noop-{i}"),
    };
    (0..spread.actions)
        .map(|i| {
            format!(
                "[actions.{a}]\ndestination = \"d{i}\"\n[destinations.d{i}]\nkind = \"http\"\n\
                 url = \"{url}\"\nidempotency = \"key\"\ntimeout = \"5s\"\n\
                 [destinations.d{i}.breaker]\nfailures = 5\ncool_down = \"30s\"\n\
                 [destinations.d{i}.rate_limit]\nper_second = 100000\nburst = 10000\n",
                a = name(i)
            )
        })
        .collect()
}

/// One size measured.
#[derive(Debug, Clone, serde::Serialize)]
struct Measured {
    size: u32,
    /// Intents drained: the backlog and the submits timed before it.
    intents: u32,
    /// Tenants with ready work when the drain started, counted in the outbox.
    tenants: i64,
    /// Ordering lanes in the lane table after the drain: those the intents used and the idle
    /// ones standing beyond them (0 off the lanes axis).
    lanes: i64,
    /// Destinations the intents were delivered to (one action each), counted in the journal.
    destinations: i64,
    submit_p50_ms: f64,
    submit_p99_ms: f64,
    /// WAL written by the timed submits, per submit (right after a checkpoint: each page's
    /// first change writes its full image).
    wal_bytes_per_submit: f64,
    /// The median claim statement (up to the worker's 100 rows), timed before the drain.
    claim_ms: f64,
    /// Rows the timed claims leased, on average.
    rows_per_claim: f64,
    deliveries_per_second: f64,
    wal_bytes_per_delivery: f64,
    /// Postgres's CPU per delivery (Linux only).
    postgres_cpu_ms_per_delivery: Option<f64>,
    /// Along the journal axis, after the drain: `oncebox ops purge --older-than 5d`, which
    /// removes a sixth of the kept intents in batches — milliseconds per 1,000 removed, and how
    /// many.
    purge_ms_per_1000: Option<f64>,
    purged: i64,
    /// The same purge as one statement, timed first in a transaction rolled back: its whole
    /// milliseconds (the pool's statement timeout would stop it at 30,000).
    purge_one_statement_ms: Option<f64>,
    /// Commit-to-arrival at each offered rate, measured after the drain.
    arrival: Vec<Arrival>,
}

/// Commit-to-arrival at one offered rate, at one size: submits paced over the size's spread
/// (tenants, lanes or destinations), each its own transaction, timed from its commit to its
/// request's arrival at the receiver.
#[derive(Debug, Clone, serde::Serialize)]
struct Arrival {
    offered: f64,
    /// Intents committed per second in the measured window.
    achieved: f64,
    samples: usize,
    p50_ms: f64,
    p99_ms: f64,
}

/// Runs the scale benchmark.
pub(crate) async fn run(a: ScaleArgs, json_out: bool) -> anyhow::Result<()> {
    let sizes = a.sizes.clone().unwrap_or_else(|| a.axis.default_sizes());
    anyhow::ensure!(
        sizes.windows(2).all(|w| w[0] < w[1]),
        "--sizes must be increasing: {sizes:?}"
    );
    anyhow::ensure!(
        a.axis == Axis::Journal || sizes.first().is_some_and(|&s| s > 0),
        "--sizes: only the journal axis has a size 0"
    );
    anyhow::ensure!(
        a.rates.iter().all(|r| matches!(r, Rate::Fixed(_))),
        "--rates: the scale benchmark offers fixed rates only, not \"max\""
    );
    let vacuum = Vacuum::read(&a.database_url).await?;
    if !vacuum.autovacuum {
        eprintln!(
            "warning: autovacuum is off on this server, so no dead outbox row is removed while \
             a backlog drains (docs/production.md asks for it on): large backlogs drain slower \
             than they would with it"
        );
    }
    let mut rounds: Vec<Vec<Measured>> = Vec::new();
    for round in 0..a.rounds {
        let mut this = Vec::new();
        for &size in &sizes {
            let m = measure(&a, size).await?;
            if !json_out {
                eprintln!(
                    "round {}: {} {size}: {:.0} deliveries/s, submit p50 {:.2} ms, claim {:.2} ms",
                    round + 1,
                    a.axis.name(),
                    m.deliveries_per_second,
                    m.submit_p50_ms,
                    m.claim_ms
                );
            }
            this.push(m);
        }
        rounds.push(this);
    }
    let medians: Vec<Measured> = (0..sizes.len())
        .map(|i| median_by_rate(rounds.iter().map(|r| r[i].clone()).collect()))
        .collect();
    draw(&a, &medians)?;
    match json_out {
        true => println!("{}", report_json(&a, &vacuum, &medians, &rounds)),
        false => print(&a, &vacuum, &medians),
    }
    Ok(())
}

/// The server's autovacuum settings, which decide how soon the outbox's dead rows are removed
/// while a backlog drains: part of what a scale curve measured.
#[derive(Debug, serde::Serialize)]
struct Vacuum {
    /// Whether autovacuum runs at all.
    autovacuum: bool,
    /// How often it visits each database.
    autovacuum_naptime: String,
}

impl Vacuum {
    /// Reads them from the server at `database_url`.
    async fn read(database_url: &str) -> anyhow::Result<Vacuum> {
        let pool = PgPool::connect(database_url).await?;
        let (on, naptime): (String, String) = sqlx::query_as(queries::AUTOVACUUM_SETTINGS)
            .fetch_one(&pool)
            .await?;
        pool.close().await;
        Ok(Vacuum {
            autovacuum: on == "on",
            autovacuum_naptime: naptime,
        })
    }

    /// How the report names them.
    fn describe(&self) -> String {
        match self.autovacuum {
            true => format!("autovacuum on, naptime {}", self.autovacuum_naptime),
            false => "autovacuum off".to_owned(),
        }
    }
}

/// Measures one size along the axis, in a scratch database of its own: the standing state
/// (journal, idle lanes) and the backlog written, submits timed, claims timed, the drain.
async fn measure(a: &ScaleArgs, size: u32) -> anyhow::Result<Measured> {
    let what = format!("scale_{}_{size}", a.axis.name());
    crate::in_scratch(&a.database_url, &what, async |scratch| {
        let spread = Spread::of(a.axis, size, a.intents);
        let receiver = noop_receiver().await?;
        let config = Config::from_toml(&config_text(a.axis, &spread, &receiver.url()))?;
        let routes = Routes::from_config(&config, None)?;
        let intake = Intake::new(&config, None)?;
        let pool = oncebox_store::connect_worker(&scratch.url, 24, Duration::from_secs(5)).await?;
        standing_state(&pool, a.axis, size, &spread).await?;
        match spread.lanes {
            0 => {
                fill_backlog(
                    &pool,
                    spread.intents as usize,
                    (spread.tenants, spread.actions),
                )
                .await?
            }
            _ => submit_lanes(&pool, &intake, &spread).await?,
        }
        settle(&pool).await?;
        let wal_before_submits = crate::harness::wal_position(&pool).await?;
        let submits = time_submits(&pool, &intake, &spread, a.submits).await?;
        let submit_wal = crate::harness::wal_since(&pool, &wal_before_submits).await?;
        let (claim_ms, rows_per_claim) = time_claims(&pool).await?;
        let n = spread.intents + a.submits;
        let (drained, worker) =
            drain_settled(&pool, &routes, a.concurrency, n as usize, None).await?;
        let arrival = arrivals(a, &scratch.url, &intake, &receiver, spread).await?;
        worker.stop().await?;
        let (purge_ms_per_1000, purged, purge_one_statement_ms) = match a.axis {
            Axis::Journal if size > 0 => {
                let one_statement = time_one_statement_purge(&pool).await?;
                let started = Instant::now();
                let purged =
                    oncebox_store::ops::purge(&pool, Duration::from_secs(5 * 86_400)).await?;
                let ms = started.elapsed().as_secs_f64() * 1e3;
                let per_1000 = ms * 1000.0 / purged.max(1) as f64;
                (Some(per_1000), purged, Some(one_statement))
            }
            _ => (None, 0, None),
        };
        let arrived: usize = arrival.iter().map(|p| p.sent).sum();
        anyhow::ensure!(
            receiver.effects().len() == n as usize + arrived,
            "backlog drained wrongly: {} effects for {n} intents and {arrived} timed ones",
            receiver.effects().len()
        );
        let arrival = arrival.into_iter().map(|p| p.arrival).collect();
        let per = |total: f64| total / f64::from(n);
        let (lanes, destinations): (i64, i64) = sqlx::query_as(queries::SCALE_SPREAD)
            .fetch_one(&pool)
            .await?;
        Ok(Measured {
            size,
            intents: n,
            tenants: drained.tenants,
            lanes,
            destinations,
            submit_p50_ms: quantile(&submits, 0.5),
            submit_p99_ms: quantile(&submits, 0.99),
            wal_bytes_per_submit: submit_wal / f64::from(a.submits),
            claim_ms,
            rows_per_claim,
            deliveries_per_second: f64::from(n) / drained.seconds,
            wal_bytes_per_delivery: per(drained.wal.bytes),
            postgres_cpu_ms_per_delivery: drained.cpu.map(|c| c.postgres_ms_per_unit),
            purge_ms_per_1000,
            purged,
            purge_one_statement_ms,
            arrival,
        })
    })
    .await
}

/// One commit-to-arrival point, with every intent it submitted (the warm-up's too).
struct ArrivalPoint {
    arrival: Arrival,
    sent: usize,
}

/// The commit-to-arrival points of one size, at each of `a.rates`, with the drain's worker
/// still running: each point starts once the outbox is empty and the worker waits.
async fn arrivals(
    a: &ScaleArgs,
    url: &str,
    intake: &Intake,
    receiver: &oncebox_receiver::Receiver,
    spread: Spread,
) -> anyhow::Result<Vec<ArrivalPoint>> {
    if a.latency_seconds == 0 {
        return Ok(Vec::new());
    }
    let pool = oncebox_store::connect_worker(url, a.submitters + 2, Duration::from_secs(5)).await?;
    let offer = Offer {
        warmup_ms: 1_000,
        seconds: a.latency_seconds,
        min_samples: 500,
        submitters: a.submitters,
        intent: Arc::new(move |key, i| spread.intent(key, i as u32)),
    };
    let mut points = Vec::new();
    for (n, &rate) in a.rates.iter().enumerate() {
        let Rate::Fixed(offered) = rate else {
            continue;
        };
        crate::latency::settle(&pool, 1).await?;
        let before = receiver.effects().len();
        let tag = format!("scale-{n}");
        let p = crate::latency::one_point(&pool, intake, receiver, &offer, rate, &tag).await?;
        crate::harness::outbox_drained(&pool, Duration::from_millis(20)).await?;
        points.push(ArrivalPoint {
            arrival: Arrival {
                offered,
                achieved: p.achieved,
                samples: p.samples,
                p50_ms: p.p50_ms,
                p99_ms: p.p99_ms,
            },
            sent: receiver.effects().len() - before,
        });
    }
    pool.close().await;
    Ok(points)
}

/// What stands in the database before the backlog: the journal's terminal intents, or the lane
/// table's idle lanes beyond those the backlog uses.
async fn standing_state(
    pool: &PgPool,
    axis: Axis,
    size: u32,
    spread: &Spread,
) -> anyhow::Result<()> {
    let (statement, rows) = match axis {
        Axis::Journal => (queries::JOURNAL, size),
        Axis::Lanes => (queries::IDLE_LANES, size - spread.lanes),
        _ => return Ok(()),
    };
    if rows > 0 {
        // A fill of millions of rows outlasts the pool's statement timeout.
        let mut tx = pool.begin().await?;
        sqlx::query("SET LOCAL statement_timeout = 0")
            .execute(&mut *tx)
            .await?;
        sqlx::query(statement)
            .bind(i64::from(rows))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
    }
    Ok(())
}

/// Submits the backlog through the library, 500 intents to a transaction, lane by lane in
/// turn: ordered intents need their lane's numbering, which only the submit does.
async fn submit_lanes(pool: &PgPool, intake: &Intake, spread: &Spread) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    for i in 0..spread.intents {
        intake
            .submit(&mut tx, spread.intent(format!("backlog-{i}"), i))
            .await?;
        if i % 500 == 499 {
            tx.commit().await?;
            tx = pool.begin().await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Submits `n` intents through the library, one per transaction, spread as the backlog is;
/// returns each submit's milliseconds, begin to commit.
async fn time_submits(
    pool: &PgPool,
    intake: &Intake,
    spread: &Spread,
    n: u32,
) -> anyhow::Result<Vec<f64>> {
    let mut took = Vec::with_capacity(n as usize);
    for i in 0..n {
        let intent = spread.intent(format!("timed-{i}"), i);
        let started = Instant::now();
        let mut tx = pool.begin().await?;
        intake.submit(&mut tx, intent).await?;
        tx.commit().await?;
        took.push(started.elapsed().as_secs_f64() * 1e3);
    }
    Ok(took)
}

/// Times the purge of intents older than 5 days as one statement, without a timeout, in a
/// transaction rolled back after: milliseconds.
async fn time_one_statement_purge(pool: &PgPool) -> anyhow::Result<f64> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL statement_timeout = 0")
        .execute(&mut *tx)
        .await?;
    let started = Instant::now();
    sqlx::query(queries::PURGE_ONE_STATEMENT)
        .bind(5.0 * 86_400.0)
        .execute(&mut *tx)
        .await?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    tx.rollback().await?;
    Ok(ms)
}

/// Times the worker's claim statement (up to 100 rows) on a claimer's own session, 20 claims
/// after one to warm the plan, in a transaction rolled back after: nothing stays leased. Returns
/// the median milliseconds and the rows per claim.
async fn time_claims(pool: &PgPool) -> anyhow::Result<(f64, f64)> {
    use sqlx::Connection;
    let mut session = oncebox_store::ClaimSession::open(pool).await?;
    let mut tx = session.connection().begin().await?;
    let (mut took, mut rows) = (Vec::new(), 0usize);
    let mut cursor = TenantCursor::default();
    for k in 0..21 {
        let started = Instant::now();
        let claimed = oncebox_store::claim(
            &mut *tx,
            Phase::Deliver,
            "scale-probe",
            100,
            Duration::from_secs(30),
            &mut cursor,
        )
        .await?;
        if k > 0 {
            took.push(started.elapsed().as_secs_f64() * 1e3);
            rows += claimed.len();
        }
    }
    tx.rollback().await?;
    let claims = took.len() as f64;
    Ok((quantile(&took, 0.5), rows as f64 / claims))
}

/// Nearest-rank quantile `p` (0–1) of `of`, in any order; 0 when empty.
fn quantile(of: &[f64], p: f64) -> f64 {
    let mut sorted = of.to_vec();
    sorted.sort_by(f64::total_cmp);
    crate::stats::percentile(&sorted, p).unwrap_or(0.0)
}

/// The round whose drain rate is the median of `of`'s.
fn median_by_rate(mut of: Vec<Measured>) -> Measured {
    of.sort_by(|a, b| a.deliveries_per_second.total_cmp(&b.deliveries_per_second));
    of.swap_remove(of.len() / 2)
}

/// Each size's cost per delivery (the inverse of its drain rate) over the smallest size's.
fn cost_ratios(medians: &[Measured]) -> Vec<f64> {
    let first = medians.first().map_or(1.0, |m| m.deliveries_per_second);
    medians
        .iter()
        .map(|m| first / m.deliveries_per_second)
        .collect()
}

fn report_json(
    a: &ScaleArgs,
    vacuum: &Vacuum,
    medians: &[Measured],
    rounds: &[Vec<Measured>],
) -> serde_json::Value {
    json!({
        "benchmark": "scale", "axis": a.axis.name(), "concurrency": a.concurrency, "server": vacuum,
        "rounds": a.rounds, "chart": a.chart.display().to_string(),
        "points": medians, "cost_ratio_to_smallest": cost_ratios(medians), "all_rounds": rounds,
    })
}

fn print(a: &ScaleArgs, vacuum: &Vacuum, medians: &[Measured]) {
    println!(
        "scale: {} — one worker, concurrency {}, median of {} round(s), {}; chart {}",
        a.axis.name(),
        a.concurrency,
        a.rounds,
        vacuum.describe(),
        a.chart.display()
    );
    println!(
        "  {:>12} {:>8} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>12} {:>10} {:>12} {:>7}",
        a.axis.name(),
        "intents",
        "tenants",
        "submit p50",
        "submit p99",
        "WAL B/sub",
        "claim ms",
        "rows/cl",
        "deliveries/s",
        "WAL B/dlv",
        "PG ms/dlv",
        "cost ×"
    );
    for (m, ratio) in medians.iter().zip(cost_ratios(medians)) {
        let cpu = m
            .postgres_cpu_ms_per_delivery
            .map_or("-".into(), |c| format!("{c:.3}"));
        println!(
            "  {:>12} {:>8} {:>8} {:>10.2} {:>10.2} {:>9.0} {:>9.2} {:>9.1} {:>12.0} {:>10.0} {:>12} {:>7.2}",
            m.size,
            m.intents,
            m.tenants,
            m.submit_p50_ms,
            m.submit_p99_ms,
            m.wal_bytes_per_submit,
            m.claim_ms,
            m.rows_per_claim,
            m.deliveries_per_second,
            m.wal_bytes_per_delivery,
            cpu,
            ratio
        );
    }
    print_arrivals(a, medians);
    for m in medians.iter().filter(|m| m.purged > 0) {
        println!(
            "  purge at {}: {} intents removed in batches, {:.1} ms per 1,000; as one statement {:.0} ms",
            m.size,
            m.purged,
            m.purge_ms_per_1000.unwrap_or(0.0),
            m.purge_one_statement_ms.unwrap_or(0.0)
        );
    }
}

/// The commit-to-arrival table: p50 and p99 at each offered rate, by size.
fn print_arrivals(a: &ScaleArgs, medians: &[Measured]) {
    let Some(first) = medians.first().filter(|m| !m.arrival.is_empty()) else {
        return;
    };
    print!("  commit-to-arrival, ms\n  {:>12}", a.axis.name());
    for p in &first.arrival {
        print!(" {:>22}", format!("p50 / p99 at {:.0}/s", p.offered));
    }
    println!();
    for m in medians {
        print!("  {:>12}", m.size);
        for p in &m.arrival {
            print!(" {:>22}", format!("{:.2} / {:.2}", p.p50_ms, p.p99_ms));
        }
        println!();
    }
}

/// The chart, in microseconds against the size: the drain per delivery, Postgres's CPU per
/// delivery, the submit's median, the claim statement's, and commit-to-arrival at the highest
/// offered rate. The journal's size is drawn as
/// every intent in it (the kept ones and the backlog), so that its size 0 has a place on the log
/// scale.
fn draw(a: &ScaleArgs, medians: &[Measured]) -> anyhow::Result<()> {
    let font = std::fs::read(&a.font)
        .map_err(|e| anyhow::anyhow!("cannot read the chart's font {}: {e}", a.font.display()))?;
    let x = |m: &Measured| match a.axis {
        Axis::Journal => f64::from(m.size) + f64::from(m.intents),
        _ => f64::from(m.size),
    };
    let points = |y: &dyn Fn(&Measured) -> Option<f64>| -> Vec<(f64, f64)> {
        medians
            .iter()
            .filter_map(|m| y(m).map(|v| (x(m), v)))
            .collect()
    };
    let line = |label: &str, points: Vec<(f64, f64)>, workers: u32, tail: bool| Series {
        label: label.into(),
        points,
        saturation: None,
        workers,
        tail,
    };
    let chart = Chart {
        title: format!(
            "oncebox cost per intent by {} (one worker, no-op HTTP receiver)",
            a.axis.name()
        ),
        series: vec![
            line(
                "drain, µs per delivery",
                points(&|m| Some(1e6 / m.deliveries_per_second)),
                1,
                false,
            ),
            line(
                "Postgres CPU, µs per delivery",
                points(&|m| m.postgres_cpu_ms_per_delivery.map(|c| c * 1e3)),
                2,
                true,
            ),
            line(
                "submit p50, µs",
                points(&|m| Some(m.submit_p50_ms * 1e3)),
                3,
                false,
            ),
            line(
                "claim statement, µs",
                points(&|m| Some(m.claim_ms * 1e3)),
                4,
                true,
            ),
        ]
        .into_iter()
        .chain(arrival_lines(medians, &x))
        .collect(),
        goals: Vec::new(),
        x_desc: a.axis.description(),
        y_desc: "microseconds",
    };
    crate::chart::draw(&chart, Path::new(&a.chart), font)
}

/// The chart's commit-to-arrival lines: p50 and p99 at the highest offered rate.
fn arrival_lines(medians: &[Measured], x: &dyn Fn(&Measured) -> f64) -> Vec<Series> {
    let Some(offered) = medians
        .first()
        .and_then(|m| m.arrival.iter().map(|p| p.offered).max_by(f64::total_cmp))
    else {
        return Vec::new();
    };
    let at = |m: &Measured| m.arrival.iter().find(|p| p.offered == offered).cloned();
    [("p50", false), ("p99", true)]
        .into_iter()
        .map(|(label, tail)| Series {
            label: format!("commit-to-arrival {label} at {offered:.0}/s, µs"),
            points: medians
                .iter()
                .filter_map(|m| {
                    let p = at(m)?;
                    Some((x(m), 1e3 * if tail { p.p99_ms } else { p.p50_ms }))
                })
                .collect(),
            saturation: None,
            workers: 5,
            tail,
        })
        .collect()
}
