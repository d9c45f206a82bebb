//! The benchmarks' arithmetic and figures: a measurement's rate and latency percentiles, the
//! median of rounds, a table of them. A leaf: every benchmark uses it, it uses none of them.

use std::time::{Duration, Instant};

use anyhow::Context;

/// What one measurement produced.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Figure {
    pub(crate) per_second: f64,
    pub(crate) p50_ms: Option<f64>,
    pub(crate) p99_ms: Option<f64>,
}

/// Prints `rows` as a table of intents/s and latencies under `title`, names `width` wide.
pub(crate) fn print_figures(title: &str, width: usize, rows: &[(&str, Figure)]) {
    let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
    println!("{title}");
    println!(
        "  {:<width$} {:>10} {:>8} {:>8}",
        "", "intents/s", "p50 ms", "p99 ms"
    );
    for (name, f) in rows {
        println!(
            "  {name:<width$} {:>10.0} {:>8} {:>8}",
            f.per_second,
            ms(f.p50_ms),
            ms(f.p99_ms)
        );
    }
}

/// Waits for every client task and makes one figure of their latencies since `start`.
pub(crate) async fn collect(
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<Vec<u32>>>>,
    start: Instant,
) -> anyhow::Result<Figure> {
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.context("benchmark client panicked")??);
    }
    Ok(figure(all, start.elapsed()))
}

/// The rate and the median and 99th-percentile latency of `latencies` (µs) over `elapsed`.
pub(crate) fn figure(mut latencies: Vec<u32>, elapsed: Duration) -> Figure {
    latencies.sort_unstable();
    let pct = |p: f64| -> Option<f64> {
        let idx = ((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1);
        latencies.get(idx).map(|us| f64::from(*us) / 1000.0)
    };
    Figure {
        per_second: latencies.len() as f64 / elapsed.as_secs_f64(),
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    }
}

/// The round whose rate is the median of `figures` (not empty).
pub(crate) fn median(figures: &[Figure]) -> Figure {
    let mut sorted = figures.to_vec();
    sorted.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    sorted[sorted.len() / 2]
}

/// Nearest-rank percentile `p` (0–1) of ascending `sorted`; `None` when empty.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    let rank = (sorted.len() as f64 * p).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied()
}
