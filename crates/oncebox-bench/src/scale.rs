//! `oncebox-bench scale`: how a drain's cost per delivery grows along one axis of the work —
//! tenants with ready work, or the backlog's size — each size drained in a scratch database of
//! its own by one in-process worker into the no-op receiver, sizes alternating round by round.
//! Printed as a table (or JSON) and drawn as a PNG: microseconds of drain and of Postgres CPU
//! per delivery against the size, both on log scales.

use std::path::Path;
use std::time::Duration;

use oncebox_worker::Routes;
use serde_json::json;

use crate::ScaleArgs;
use crate::chart::{Chart, Series};
use crate::harness::{drain_measured, noop_sink};

/// The axis a scale run grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Axis {
    /// Tenants the same backlog (`--intents`) is spread over, each with ready work.
    Tenants,
    /// Ready intents in the backlog, of one tenant.
    Backlog,
}

impl Axis {
    /// The axis's name in reports and file names.
    fn name(self) -> &'static str {
        match self {
            Axis::Tenants => "tenants",
            Axis::Backlog => "backlog",
        }
    }

    /// The sizes measured when `--sizes` is not given.
    pub(crate) fn default_sizes(self) -> Vec<u32> {
        match self {
            Axis::Tenants => vec![1, 100, 1_000, 10_000],
            Axis::Backlog => vec![20_000, 200_000, 1_000_000],
        }
    }
}

/// One drain at one size.
#[derive(Debug, Clone, serde::Serialize)]
struct Measured {
    size: u32,
    intents: u32,
    /// Tenants with ready work when the drain started, counted in the outbox.
    tenants: i64,
    deliveries_per_second: f64,
    wal_bytes_per_delivery: f64,
    /// Postgres's CPU per delivery (Linux only).
    postgres_cpu_ms_per_delivery: Option<f64>,
}

/// Runs the scale benchmark.
pub(crate) async fn run(a: ScaleArgs, json_out: bool) -> anyhow::Result<()> {
    let sizes = a.sizes.clone().unwrap_or_else(|| a.axis.default_sizes());
    anyhow::ensure!(
        sizes.windows(2).all(|w| w[0] < w[1]),
        "--sizes must be increasing: {sizes:?}"
    );
    let mut rounds: Vec<Vec<Measured>> = Vec::new();
    for round in 0..a.rounds {
        let mut this = Vec::new();
        for &size in &sizes {
            let m = measure(&a, size).await?;
            if !json_out {
                eprintln!(
                    "round {}: {} {size}: {:.0} deliveries/s",
                    round + 1,
                    a.axis.name(),
                    m.deliveries_per_second
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
        true => println!("{}", report_json(&a, &medians, &rounds)),
        false => print(&a, &medians),
    }
    Ok(())
}

/// Drains one backlog of `size` along the axis, in a scratch database of its own.
async fn measure(a: &ScaleArgs, size: u32) -> anyhow::Result<Measured> {
    let what = format!("scale_{}_{size}", a.axis.name());
    crate::in_scratch(&a.database_url, &what, async |scratch| {
        let (receiver, config) = noop_sink("", "").await?;
        let routes = Routes::from_config(&config, None)?;
        let pool = oncebox_store::connect_worker(&scratch.url, 24, Duration::from_secs(5)).await?;
        let (intents, tenants) = match a.axis {
            Axis::Tenants => (a.intents, size),
            Axis::Backlog => (size, 1),
        };
        let (drained, worker) = drain_measured(
            &pool,
            &routes,
            a.concurrency,
            (intents as usize, tenants),
            false,
        )
        .await?;
        worker.stop().await?;
        anyhow::ensure!(
            receiver.effects().len() == intents as usize,
            "backlog drained wrongly: {} effects for {intents} intents",
            receiver.effects().len()
        );
        let per = |total: f64| total / f64::from(intents);
        Ok(Measured {
            size,
            intents,
            tenants: drained.tenants,
            deliveries_per_second: f64::from(intents) / drained.seconds,
            wal_bytes_per_delivery: per(drained.wal.bytes),
            postgres_cpu_ms_per_delivery: drained.cpu.map(|c| c.postgres_ms_per_unit),
        })
    })
    .await
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

fn report_json(a: &ScaleArgs, medians: &[Measured], rounds: &[Vec<Measured>]) -> serde_json::Value {
    json!({
        "benchmark": "scale", "axis": a.axis.name(), "concurrency": a.concurrency,
        "rounds": a.rounds, "chart": a.chart.display().to_string(),
        "points": medians, "cost_ratio_to_smallest": cost_ratios(medians), "all_rounds": rounds,
    })
}

fn print(a: &ScaleArgs, medians: &[Measured]) {
    println!(
        "scale: {} — one worker, concurrency {}, median of {} round(s); chart {}",
        a.axis.name(),
        a.concurrency,
        a.rounds,
        a.chart.display()
    );
    println!(
        "  {:>10} {:>9} {:>9} {:>14} {:>12} {:>16} {:>10}",
        a.axis.name(),
        "intents",
        "tenants",
        "deliveries/s",
        "WAL B/dlv",
        "Postgres ms/dlv",
        "cost ×"
    );
    for (m, ratio) in medians.iter().zip(cost_ratios(medians)) {
        let cpu = m
            .postgres_cpu_ms_per_delivery
            .map_or("-".into(), |c| format!("{c:.3}"));
        println!(
            "  {:>10} {:>9} {:>9} {:>14.0} {:>12.0} {:>16} {:>10.2}",
            m.size,
            m.intents,
            m.tenants,
            m.deliveries_per_second,
            m.wal_bytes_per_delivery,
            cpu,
            ratio
        );
    }
}

/// The chart: microseconds of drain per delivery, and of Postgres CPU per delivery, against
/// the size.
fn draw(a: &ScaleArgs, medians: &[Measured]) -> anyhow::Result<()> {
    let font = std::fs::read(&a.font)
        .map_err(|e| anyhow::anyhow!("cannot read the chart's font {}: {e}", a.font.display()))?;
    let drain: Vec<(f64, f64)> = medians
        .iter()
        .map(|m| (f64::from(m.size), 1e6 / m.deliveries_per_second))
        .collect();
    let cpu: Vec<(f64, f64)> = medians
        .iter()
        .filter_map(|m| {
            m.postgres_cpu_ms_per_delivery
                .map(|c| (f64::from(m.size), c * 1000.0))
        })
        .collect();
    let line = |label: &str, points: Vec<(f64, f64)>, workers: u32, tail: bool| Series {
        label: label.into(),
        points,
        saturation: None,
        workers,
        tail,
    };
    let chart = Chart {
        title: format!(
            "oncebox drain cost per delivery by {} (one worker, no-op HTTP receiver)",
            a.axis.name()
        ),
        series: vec![
            line("drain, µs per delivery", drain, 1, false),
            line("Postgres CPU, µs per delivery", cpu, 2, true),
        ],
        goals: Vec::new(),
        x_desc: match a.axis {
            Axis::Tenants => "tenants with ready work",
            Axis::Backlog => "ready intents in the backlog",
        },
        y_desc: "microseconds per delivery",
    };
    crate::chart::draw(&chart, Path::new(&a.chart), font)
}
