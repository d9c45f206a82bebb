//! `oncebox-bench intake`: the library submit against the raw two-insert transaction, run
//! in-process and by pgbench, in alternating rounds; and the same submit for an action with an
//! approval policy whose condition the arguments do not match (the policy's cost when it does
//! not ask).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_core::{IntentNames, NewIntent};
use oncebox_store::Intake;
use oncebox_store::scratch::ScratchDb;
use serde_json::{Value, json};
use sqlx::{Acquire, PgPool};

use crate::IntakeArgs;
use crate::baseline::{Scripts, pgbench_available};
use crate::queries;
use crate::stats::{Figure, collect, median, print_figures};

/// Runs the intake benchmark in a scratch database of its own.
pub(crate) async fn run(a: IntakeArgs, json: bool) -> anyhow::Result<()> {
    crate::in_scratch(&a.database_url, "intake", async |scratch| {
        intake_rounds(&a, scratch, json).await
    })
    .await
}

#[derive(Clone)]
pub(crate) enum Load {
    Oncebox(Intake),
    RawSql,
}

async fn intake_rounds(a: &IntakeArgs, scratch: &ScratchDb, json: bool) -> anyhow::Result<()> {
    let pool = scratch.pool(a.clients + 1).await?;
    sqlx::raw_sql(crate::baseline::SETUP).execute(&pool).await?;
    let intake = Intake::from_actions([("create_invoice".to_owned(), vec![])], None)
        .context("the benchmark's action hashes nothing")?;
    let with_policy = Intake::new(
        &oncebox_core::config::Config::from_toml(POLICY).context("the policy's config")?,
        None,
    )
    .context("the benchmark's action hashes nothing")?;
    let scripts = Scripts::new(a.baseline.baseline_dir.as_deref())?;
    let pgbench_script = scripts.get("intake.sql").filter(|_| pgbench_available());
    let secs = Duration::from_secs(a.seconds);
    let clients = a.clients as usize;

    let (mut ours, mut notified, mut raw, mut pg, mut policy) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..a.rounds as usize {
        reset(&pool).await?;
        ours.push(measure(&pool, Load::Oncebox(intake.clone()), clients, secs, round).await?);
        reset(&pool).await?;
        let load = Load::Oncebox(with_policy.clone());
        policy.push(measure(&pool, load, clients, secs, round).await?);
        if !a.skip_notify_case {
            reset(&pool).await?;
            let waiter = WaitingWorker::start(&pool).await?;
            notified
                .push(measure(&pool, Load::Oncebox(intake.clone()), clients, secs, round).await?);
            let heard = waiter.stop(&pool).await?;
            anyhow::ensure!(heard > 0, "the waiting worker heard no NOTIFY");
        }
        reset(&pool).await?;
        raw.push(measure(&pool, Load::RawSql, clients, secs, round).await?);
        if let Some(script) = &pgbench_script {
            reset(&pool).await?;
            pg.push(run_pgbench(script, &scratch.url, clients, a.seconds).await?);
        }
        if !json {
            eprintln!(
                "round {}: oncebox {:.0}/s ({:.0}/s with an approval policy){}, raw SQL {:.0}/s{}",
                round + 1,
                ours[round].per_second,
                policy[round].per_second,
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
    let rounds = Rounds {
        ours,
        notified,
        raw,
        pg,
        policy,
    };
    if json {
        println!("{}", rounds.json(a));
    } else {
        rounds.print(a, &scripts);
    }
    Ok(())
}

/// An action whose approval policy asks only for refunds of 100,000 or more: the benchmark's
/// arguments (12,500.00) are matched against it and pass without waiting.
const POLICY: &str = r#"
[actions.create_invoice]
destination = "billing"
[actions.create_invoice.approval.when]
type = "object"
required = ["amount"]
properties.amount = { decimalMinimum = "100000" }

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "key"
"#;

/// Every round's figures, by case.
struct Rounds {
    ours: Vec<Figure>,
    notified: Vec<Figure>,
    raw: Vec<Figure>,
    pg: Vec<Figure>,
    /// The action with an approval policy that does not ask.
    policy: Vec<Figure>,
}

impl Rounds {
    fn medians(&self) -> (Figure, Option<Figure>, Figure, Option<Figure>) {
        (
            median(&self.ours),
            (!self.notified.is_empty()).then(|| median(&self.notified)),
            median(&self.raw),
            (!self.pg.is_empty()).then(|| median(&self.pg)),
        )
    }

    fn json(&self, a: &IntakeArgs) -> Value {
        let (ours_m, notified_m, raw_m, pg_m) = self.medians();
        json!({
            "benchmark": "intake", "clients": a.clients, "seconds": a.seconds, "rounds": a.rounds,
            "oncebox": ours_m, "oncebox_worker_waiting": notified_m, "raw_sql": raw_m, "pgbench": pg_m,
            "ratio_to_raw_sql": ours_m.per_second / raw_m.per_second,
            "ratio_to_pgbench": pg_m.map(|p| ours_m.per_second / p.per_second),
            "ratio_worker_waiting_to_raw_sql": notified_m.map(|n| n.per_second / raw_m.per_second),
            "oncebox_approval_policy": median(&self.policy),
            "ratio_approval_policy_to_oncebox": median(&self.policy).per_second / ours_m.per_second,
            "rounds_detail": {"oncebox": self.ours, "oncebox_worker_waiting": self.notified,
                              "raw_sql": self.raw, "pgbench": self.pg,
                              "oncebox_approval_policy": self.policy},
        })
    }

    fn print(&self, a: &IntakeArgs, scripts: &Scripts) {
        let (ours_m, notified_m, raw_m, pg_m) = self.medians();
        let ratio_raw = ours_m.per_second / raw_m.per_second;
        let ratio_pg = pg_m.map(|p| ours_m.per_second / p.per_second);
        let policy = median(&self.policy);
        let mut rows = vec![
            ("oncebox submit, no worker waiting (no NOTIFY)", ours_m),
            ("oncebox submit, approval policy not asking", policy),
        ];
        if let Some(n) = notified_m {
            rows.push(("oncebox submit, a worker waiting (NOTIFY)", n));
        }
        rows.push(("raw two-insert transaction (same process)", raw_m));
        if let Some(p) = pg_m {
            rows.push(("raw pgbench baseline/intake.sql", p));
        }
        print_figures(
            &format!(
                "intake: {} clients, {} s x {} rounds; medians",
                a.clients, a.seconds, a.rounds
            ),
            44,
            &rows,
        );
        println!("  ratio oncebox / raw SQL:  {ratio_raw:.2}");
        println!(
            "  ratio with an approval policy / without:  {:.2}",
            policy.per_second / ours_m.per_second
        );
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
                "  (pgbench baseline skipped: pgbench or {}/intake.sql not found)",
                scripts.dir().display()
            );
        }
    }
}

/// A worker waiting for work, as the delivery pool registers one when idle: registered in
/// `oncebox.waiting_workers` and draining notifications on a LISTEN connection.
struct WaitingWorker {
    task: tokio::task::JoinHandle<Result<u64, sqlx::Error>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl WaitingWorker {
    async fn start(pool: &PgPool) -> anyhow::Result<WaitingWorker> {
        let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
        listener.listen(oncebox_store::OUTBOX_CHANNEL).await?;
        oncebox_store::register_waiting(pool, "bench-waiter").await?;
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

    async fn stop(self, pool: &PgPool) -> anyhow::Result<u64> {
        oncebox_store::deregister_waiting(pool, "bench-waiter").await?;
        let _ = self.stop.send(());
        Ok(self.task.await.context("waiting worker panicked")??)
    }
}

pub(crate) async fn reset(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::raw_sql(queries::RESET).execute(pool).await?;
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
) -> anyhow::Result<Figure> {
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
                        let intent = NewIntent::new(
                            IntentNames {
                                tenant_id: "tenant-42",
                                idempotency_key: &key,
                                action: "create_invoice",
                            },
                            payload.clone(),
                        );
                        intake.submit(&mut tx, intent).await?;
                    }
                    Load::RawSql => {
                        sqlx::query(queries::RAW_INTAKE)
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
    collect(tasks, start).await
}

/// Runs the baseline intake script with pgbench against the scratch database.
pub(crate) async fn run_pgbench(
    script: &Path,
    url: &str,
    clients: usize,
    seconds: u64,
) -> anyhow::Result<Figure> {
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
