//! `oncebox-bench lanes`: deliveries per second of per-key ordering lanes against the same
//! intents unordered, in the same run: `--lanes` lanes of `--per-lane` intents each, submitted
//! interleaved through the library (so each lane's intents are spread over the backlog), then
//! drained by one in-process worker into a fresh key-honouring receiver that answers after
//! `--receiver-ms`. Unordered, the worker keeps `--concurrency` deliveries in flight; ordered, at
//! most one per lane, each waiting for the one before it to be recorded. The two alternate in
//! every round from the same empty journal.

use std::time::{Duration, Instant};

use oncebox_core::{IntentNames, NewIntent};
use oncebox_store::Intake;
use oncebox_store::scratch::ScratchDb;
use oncebox_worker::Routes;
use serde_json::json;
use sqlx::PgPool;

use crate::LanesArgs;
use crate::stats::{Figure, median, print_figures};

/// The cases: unordered, then ordered.
const CASES: [&str; 2] = ["unordered", "ordered lanes"];

/// Runs the lanes benchmark in a scratch database of its own.
pub(crate) async fn run(a: LanesArgs, json_out: bool) -> anyhow::Result<()> {
    crate::in_scratch(&a.database_url, "lanes", async |scratch| {
        rounds(&a, scratch, json_out).await
    })
    .await
}

/// Submits the backlog: intent `n` of every lane, for each `n`, 500 to a transaction.
async fn fill(pool: &PgPool, intake: &Intake, a: &LanesArgs, ordered: bool) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    let mut in_tx = 0;
    for n in 0..a.per_lane {
        for lane in 0..a.lanes {
            let intent = NewIntent {
                ordering_key: ordered.then(|| format!("lane-{lane}")),
                ..NewIntent::new(
                    IntentNames {
                        tenant_id: "bench",
                        idempotency_key: &format!("l{lane}-{n}"),
                        action: "noop",
                    },
                    json!({"lane": lane, "n": n, "faults": [format!("slow:{}", a.receiver_ms)]}),
                )
            };
            intake.submit(&mut tx, intent).await?;
            in_tx += 1;
            if in_tx == 500 {
                tx.commit().await?;
                tx = pool.begin().await?;
                in_tx = 0;
            }
        }
    }
    tx.commit().await?;
    Ok(())
}

/// One drain of case `ordered`: deliveries per second.
async fn drain(pool: &PgPool, a: &LanesArgs, ordered: bool) -> anyhow::Result<f64> {
    // A fresh receiver per drain: every key is a first effect, never a replay.
    let (receiver, config) = crate::harness::noop_sink("", "").await?;
    let routes = Routes::from_config(&config, None)?;
    let intake = Intake::new(&config, None)?;
    sqlx::raw_sql(crate::queries::RESET_JOURNAL)
        .execute(pool)
        .await?;
    fill(pool, &intake, a, ordered).await?;
    let n = (a.lanes * a.per_lane) as usize;
    let started = Instant::now();
    let worker = crate::harness::start_worker(pool, &routes, a.concurrency).await;
    while receiver.effects().len() < n {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "{} of {n} delivered after 600 s",
            receiver.effects().len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    worker.stop().await?;
    let effects = receiver.effects();
    anyhow::ensure!(
        effects.len() == n && effects.values().all(|&e| e == 1),
        "{} keys with effects for {n} intents, or a key with two",
        effects.len()
    );
    Ok(n as f64 / elapsed)
}

async fn rounds(a: &LanesArgs, scratch: &ScratchDb, json_out: bool) -> anyhow::Result<()> {
    let pool = oncebox_store::connect_worker(&scratch.url, 24, Duration::from_secs(5)).await?;
    let mut figures: Vec<Vec<Figure>> = vec![Vec::new(); CASES.len()];
    for round in 0..a.rounds {
        for k in 0..CASES.len() {
            let i = (k + round as usize) % CASES.len();
            let per_second = drain(&pool, a, i == 1).await?;
            if !json_out {
                eprintln!(
                    "round {}: {} {per_second:.0} deliveries/s",
                    round + 1,
                    CASES[i]
                );
            }
            figures[i].push(Figure {
                per_second,
                p50_ms: None,
                p99_ms: None,
            });
        }
    }
    let medians: Vec<Figure> = figures.iter().map(|f| median(f)).collect();
    let ratio = medians[1].per_second / medians[0].per_second;
    if json_out {
        println!(
            "{}",
            json!({
                "benchmark": "lanes", "lanes": a.lanes, "per_lane": a.per_lane,
                "receiver_ms": a.receiver_ms, "rounds": a.rounds,
                "unordered": medians[0], "ordered": medians[1], "ratio_ordered": ratio,
            })
        );
    } else {
        let rows: Vec<(&str, Figure)> = CASES.iter().copied().zip(medians.clone()).collect();
        print_figures(
            &format!(
                "HTTP deliveries of {} lanes x {} intents (receiver answers after {} ms), {} \
                 rounds; medians",
                a.lanes, a.per_lane, a.receiver_ms, a.rounds
            ),
            24,
            &rows,
        );
        println!("  ratio ordered / unordered:  {ratio:.2}");
        println!(
            "  ordered bound: {} lanes / per-delivery time (each lane waits for the one before)",
            a.lanes
        );
    }
    Ok(())
}
