//! `oncebox bench`: throughput measured side by side with a raw baseline in the same run, in
//! alternating rounds, reported as medians and ratios (the machine is noisy; absolute numbers
//! mean little, ratios measured together do).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_core::NewIntent;
use oncebox_store::Intake;
use serde_json::{Value, json};
use sqlx::{Acquire, PgPool};

use crate::cli::{BenchArgs, BenchWhat, IntakeBenchArgs};
use crate::exit::{CliError, CliResult};
use crate::scratch::ScratchDb;

/// The raw reference tables, as in shared/bench/setup.sql.
pub(crate) const BASELINE_SETUP: &str = "
CREATE TABLE baseline_journal (
  id bigserial PRIMARY KEY, tenant_id text NOT NULL, idempotency_key text NOT NULL,
  request_hash text NOT NULL, payload jsonb NOT NULL, status text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (tenant_id, idempotency_key));
CREATE TABLE baseline_outbox (
  id bigserial PRIMARY KEY, intent_id bigint NOT NULL, available_at timestamptz NOT NULL DEFAULT now(),
  lease_owner text, lease_expires_at timestamptz, epoch bigint NOT NULL DEFAULT 0);
CREATE INDEX baseline_outbox_ready ON baseline_outbox (available_at) WHERE lease_owner IS NULL;";

/// The two inserts of shared/bench/intake.sql, with the key bound instead of pgbench's random().
const BASELINE_INTAKE: &str = "
WITH j AS (
  INSERT INTO baseline_journal (tenant_id, idempotency_key, request_hash, payload, status)
  VALUES ('tenant-42', $1, 'ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12',
          '{\"action\":\"create_invoice\",\"arguments\":{\"order_id\":\"order-8172\",\"amount\":\"12500.00\",\"currency\":\"RUB\"}}',
          'pending')
  ON CONFLICT DO NOTHING RETURNING id)
INSERT INTO baseline_outbox (intent_id) SELECT id FROM j";

pub(crate) async fn run(args: BenchArgs, json: bool) -> CliResult {
    match args.what {
        BenchWhat::Intake(a) => intake(a, json).await,
        BenchWhat::Deliver(a) => crate::bench_deliver::run(a, json).await,
    }
}

/// What one measurement produced.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(crate) struct Figure {
    pub(crate) per_second: f64,
    pub(crate) p50_ms: Option<f64>,
    pub(crate) p99_ms: Option<f64>,
}

#[derive(Clone)]
pub(crate) enum Load {
    Oncebox(Intake),
    RawSql,
}

async fn intake(a: IntakeBenchArgs, json: bool) -> CliResult {
    if a.clients == 0 || a.seconds == 0 || a.rounds == 0 {
        return Err(CliError::usage(
            "clients",
            "--clients, --seconds and --rounds must be at least 1",
        ));
    }
    let scratch = ScratchDb::create(
        &a.database_url,
        &format!("oncebox_bench_{}", std::process::id()),
    )
    .await?;
    let result = if a.http {
        crate::bench_http::intake_rounds(&a, &scratch, json).await
    } else {
        intake_rounds(&a, &scratch, json).await
    };
    scratch.drop_db().await?;
    result
}

async fn intake_rounds(a: &IntakeBenchArgs, scratch: &ScratchDb, json: bool) -> CliResult {
    let pool = scratch
        .pool(u32::try_from(a.clients + 1).unwrap_or(u32::MAX))
        .await?;
    sqlx::raw_sql(BASELINE_SETUP).execute(&pool).await?;
    let intake = Intake::from_actions([("create_invoice".to_owned(), vec![])]);
    let pgbench_script = a.baseline_dir.join("intake.sql");
    let pgbench = pgbench_available() && pgbench_script.exists();
    let secs = Duration::from_secs(a.seconds);

    let (mut ours, mut notified, mut raw, mut pg) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..a.rounds {
        reset(&pool).await?;
        ours.push(measure(&pool, Load::Oncebox(intake.clone()), a.clients, secs, round).await?);
        if !a.skip_notify_case {
            reset(&pool).await?;
            let waiter = WaitingWorker::start(&pool).await?;
            notified
                .push(measure(&pool, Load::Oncebox(intake.clone()), a.clients, secs, round).await?);
            let heard = waiter.stop(&pool).await?;
            if heard == 0 {
                return Err(CliError::Other(anyhow::anyhow!(
                    "the waiting worker heard no NOTIFY"
                )));
            }
        }
        reset(&pool).await?;
        raw.push(measure(&pool, Load::RawSql, a.clients, secs, round).await?);
        if pgbench {
            reset(&pool).await?;
            pg.push(run_pgbench(&pgbench_script, &scratch.url, a.clients, a.seconds).await?);
        }
        if !json {
            eprintln!(
                "round {}: oncebox {:.0}/s{}, raw SQL {:.0}/s{}",
                round + 1,
                ours[round].per_second,
                notified.get(round).map_or(String::new(), |f| format!(
                    " ({:.0}/s with a worker waiting)",
                    f.per_second
                )),
                raw[round].per_second,
                pg.get(round).map_or(String::new(), |f| format!(
                    ", pgbench {:.0}/s",
                    f.per_second
                ))
            );
        }
    }
    let (ours_m, raw_m) = (median(&ours), median(&raw));
    let notified_m = (!notified.is_empty()).then(|| median(&notified));
    let pg_m = (!pg.is_empty()).then(|| median(&pg));
    let ratio_raw = ours_m.per_second / raw_m.per_second;
    let ratio_pg = pg_m.map(|p| ours_m.per_second / p.per_second);
    if json {
        let doc: Value = json!({
            "benchmark": "intake", "clients": a.clients, "seconds": a.seconds, "rounds": a.rounds,
            "oncebox": ours_m, "oncebox_worker_waiting": notified_m, "raw_sql": raw_m, "pgbench": pg_m,
            "ratio_to_raw_sql": ratio_raw, "ratio_to_pgbench": ratio_pg,
            "ratio_worker_waiting_to_raw_sql": notified_m.map(|n| n.per_second / raw_m.per_second),
            "rounds_detail": {"oncebox": ours, "oncebox_worker_waiting": notified, "raw_sql": raw, "pgbench": pg},
        });
        println!("{doc}");
    } else {
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        println!(
            "intake: {} clients, {} s x {} rounds; medians",
            a.clients, a.seconds, a.rounds
        );
        println!(
            "  {:<44} {:>10} {:>8} {:>8}",
            "", "intents/s", "p50 ms", "p99 ms"
        );
        let line = |name: &str, f: &Figure| {
            println!(
                "  {name:<44} {:>10.0} {:>8} {:>8}",
                f.per_second,
                ms(f.p50_ms),
                ms(f.p99_ms)
            );
        };
        line("oncebox submit, no worker waiting (no NOTIFY)", &ours_m);
        if let Some(n) = &notified_m {
            line("oncebox submit, a worker waiting (NOTIFY)", n);
        }
        line("raw two-insert transaction (same process)", &raw_m);
        if let Some(p) = &pg_m {
            line("raw pgbench shared/bench/intake.sql", p);
        }
        println!("  ratio oncebox / raw SQL:  {ratio_raw:.2}");
        if let Some(n) = &notified_m {
            println!(
                "  ratio with a worker waiting / raw SQL:  {:.2}",
                n.per_second / raw_m.per_second
            );
        }
        if let Some(r) = ratio_pg {
            println!("  ratio oncebox / pgbench:  {r:.2}");
        } else {
            println!(
                "  (pgbench baseline skipped: pgbench or {} not found)",
                pgbench_script.display()
            );
        }
    }
    Ok(())
}

/// A worker waiting for work, as the delivery pool registers one when idle: registered in
/// `oncebox.waiting_workers` and draining notifications on a LISTEN connection.
struct WaitingWorker {
    task: tokio::task::JoinHandle<Result<u64, sqlx::Error>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl WaitingWorker {
    async fn start(pool: &PgPool) -> Result<WaitingWorker, CliError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
        listener.listen(oncebox_store::OUTBOX_CHANNEL).await?;
        oncebox_store::register_waiting(&mut *pool.acquire().await?, "bench-waiter").await?;
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut heard = 0u64;
            loop {
                tokio::select! {
                    _ = &mut stopped => return Ok(heard),
                    n = listener.recv() => { n?; heard += 1; }
                }
            }
        });
        Ok(WaitingWorker { task, stop })
    }

    async fn stop(self, pool: &PgPool) -> Result<u64, CliError> {
        oncebox_store::deregister_waiting(&mut *pool.acquire().await?, "bench-waiter").await?;
        let _ = self.stop.send(());
        Ok(self.task.await.context("waiting worker panicked")??)
    }
}

pub(crate) async fn reset(pool: &PgPool) -> Result<(), CliError> {
    sqlx::raw_sql(
        "TRUNCATE oncebox.outbox, oncebox.attempts, oncebox.intents, oncebox.waiting_workers,
                  baseline_outbox, baseline_journal;
         CHECKPOINT;",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Runs `clients` loops for `secs`, each a task on its own connection, one intent per
/// transaction; returns the rate and the latency of begin → commit.
pub(crate) async fn measure(
    pool: &PgPool,
    load: Load,
    clients: usize,
    secs: Duration,
    round: usize,
) -> Result<Figure, CliError> {
    let payload = json!({"order_id": "order-8172", "amount": "12500.00", "currency": "RUB"});
    let start = Instant::now();
    let end = start + secs;
    let mut tasks = Vec::with_capacity(clients);
    for client in 0..clients {
        let (pool, load, payload) = (pool.clone(), load.clone(), payload.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            let mut latencies: Vec<u32> = Vec::with_capacity(64 * 1024);
            let mut i = 0u64;
            while Instant::now() < end {
                let key = format!("bench-{round}-{client}-{i}");
                i += 1;
                let t = Instant::now();
                let mut tx = conn.begin().await?;
                match &load {
                    Load::Oncebox(intake) => {
                        let intent =
                            NewIntent::new("tenant-42", key, "create_invoice", payload.clone());
                        intake.submit(&mut tx, intent).await?;
                    }
                    Load::RawSql => {
                        sqlx::query(BASELINE_INTAKE)
                            .bind(key)
                            .execute(&mut *tx)
                            .await?;
                    }
                }
                tx.commit().await?;
                latencies.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
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

pub(crate) fn pgbench_available() -> bool {
    std::process::Command::new("pgbench")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs shared/bench/intake.sql with pgbench against the scratch database, as baseline.sh does.
pub(crate) async fn run_pgbench(
    script: &Path,
    url: &str,
    clients: usize,
    seconds: u64,
) -> Result<Figure, CliError> {
    let out = tokio::process::Command::new("pgbench")
        .args(["-n", "-f"])
        .arg(script)
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-T",
            &seconds.to_string(),
            url,
        ])
        .output()
        .await
        .context("cannot run pgbench")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let tps = text
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| {
            format!(
                "pgbench printed no tps: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    // pgbench reports an average latency, not percentiles: none are quoted for it.
    Ok(Figure {
        per_second: tps,
        p50_ms: None,
        p99_ms: None,
    })
}

pub(crate) fn median(figures: &[Figure]) -> Figure {
    let mut sorted = figures.to_vec();
    sorted.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    sorted[sorted.len() / 2]
}
