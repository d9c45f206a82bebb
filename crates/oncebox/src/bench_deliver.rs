//! `oncebox bench deliver`: the delivery pipeline against the raw claim+complete cycle.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_core::NewIntent;
use oncebox_core::config::Config;
use oncebox_receiver::{Receiver, ReceiverConfig};
use oncebox_store::Intake;
use oncebox_worker::{Metrics, Routes, WorkerSettings};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::bench::pgbench_available;
use crate::cli::DeliverBenchArgs;
use crate::exit::{CliError, CliResult};
use crate::scratch::ScratchDb;

pub(crate) async fn run(a: DeliverBenchArgs, json_out: bool) -> CliResult {
    if a.intents == 0 || a.concurrency == 0 || a.seconds == 0 {
        return Err(CliError::usage(
            "intents",
            "--intents, --concurrency and --seconds must be at least 1",
        ));
    }
    let scratch = ScratchDb::create(
        &a.database_url,
        &format!("oncebox_bench_deliver_{}", std::process::id()),
    )
    .await?;
    let result = if a.amqp {
        measure_amqp(&a, &scratch, json_out).await
    } else {
        measure(&a, &scratch, json_out).await
    };
    scratch.drop_db().await?;
    result
}

struct Running {
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), oncebox_worker::WorkerError>>,
}

async fn start_worker(pool: &PgPool, routes: &Routes, concurrency: usize) -> Running {
    let cancel = CancellationToken::new();
    let settings = WorkerSettings {
        id: "bench".into(),
        concurrency,
        batch: 100,
        lease: Duration::from_secs(10),
        poll_interval: Duration::from_millis(50),
        grace: Duration::from_secs(2),
        ..WorkerSettings::default()
    };
    let task = tokio::spawn(oncebox_worker::run(
        pool.clone(),
        routes.clone(),
        settings,
        Arc::new(Metrics::default()),
        cancel.clone(),
    ));
    Running { cancel, task }
}

impl Running {
    async fn stop(self) -> Result<(), CliError> {
        self.cancel.cancel();
        self.task
            .await
            .context("worker panicked")?
            .map_err(|e| CliError::Other(e.into()))
    }
}

/// Fills a backlog of `n` intents for the action `noop`, starts a worker and waits until the
/// outbox is empty; checks every intent succeeded. Returns the drain time and the worker.
async fn drain_backlog(
    pool: &PgPool,
    routes: &Routes,
    concurrency: usize,
    n: usize,
) -> Result<(f64, Running), CliError> {
    sqlx::query(
        "WITH i AS (INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload)
                    SELECT 'bench', 'backlog-' || g, 'noop', repeat('0', 64), '{\"n\": 1}'
                    FROM generate_series(1, $1) g RETURNING id)
         INSERT INTO oncebox.outbox (intent_id, phase) SELECT id, 'deliver' FROM i",
    )
    .bind(i64::try_from(n).unwrap_or(i64::MAX))
    .execute(pool)
    .await?;
    for sql in [
        "VACUUM ANALYZE oncebox.intents",
        "VACUUM ANALYZE oncebox.outbox",
        "CHECKPOINT",
    ] {
        sqlx::raw_sql(sql).execute(pool).await?;
    }
    let started = Instant::now();
    let worker = start_worker(pool, routes, concurrency).await;
    while outbox_left(pool).await? > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let drain = started.elapsed().as_secs_f64();
    let succeeded: i64 =
        sqlx::query_scalar("SELECT count(*) FROM oncebox.intents WHERE status = 'succeeded'")
            .fetch_one(pool)
            .await?;
    if succeeded != n as i64 {
        return Err(CliError::Other(anyhow::anyhow!(
            "backlog drained wrongly: {succeeded} of {n} intents succeeded"
        )));
    }
    Ok((drain, worker))
}

async fn outbox_left(pool: &PgPool) -> Result<i64, CliError> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox")
        .fetch_one(pool)
        .await?)
}

async fn measure(a: &DeliverBenchArgs, scratch: &ScratchDb, json_out: bool) -> CliResult {
    let receiver = Receiver::start(ReceiverConfig {
        honours_keys: true,
        ..ReceiverConfig::default()
    })
    .await
    .context("receiver")?;
    let config = Config::from_toml(&format!(
        "[actions.noop]\ndestination = \"sink\"\n[destinations.sink]\nkind = \"http\"\nurl = \"{}\"\nidempotency = \"key\"\ntimeout = \"5s\"\n",
        receiver.url()
    ))
    .map_err(|e| CliError::Other(anyhow::anyhow!("{e}")))?;
    let routes = Routes::from_config(&config, None).map_err(|e| CliError::Other(e.into()))?;
    let pool = oncebox_store::connect_worker(&scratch.url, 24, Duration::from_secs(5))
        .await
        .map_err(|e| CliError::Other(e.into()))?;

    // 1. Throughput: drain a backlog.
    let (drain, worker) = drain_backlog(&pool, &routes, a.concurrency, a.intents).await?;
    let rate = a.intents as f64 / drain;
    if receiver.effects().len() != a.intents {
        return Err(CliError::Other(anyhow::anyhow!(
            "backlog drained wrongly: {} effects for {} intents",
            receiver.effects().len(),
            a.intents
        )));
    }
    if !json_out {
        eprintln!("backlog: {} intents delivered in {drain:.2} s", a.intents);
    }

    // 2. Latency at half that rate: paced submits, commit → arrival at the receiver.
    let target = rate / 2.0;
    let intake = Intake::new(&config);
    let submitters = 32usize;
    let per_task_interval = Duration::from_secs_f64(submitters as f64 / target);
    let end = Instant::now() + Duration::from_secs(a.seconds);
    let mut tasks = Vec::new();
    for s in 0..submitters {
        let (pool, intake) = (pool.clone(), intake.clone());
        tasks.push(tokio::spawn(async move {
            let mut committed: Vec<(String, Instant)> = Vec::new();
            let mut tick = tokio::time::interval(per_task_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut i = 0;
            while Instant::now() < end {
                tick.tick().await;
                let key = format!("paced-{s}-{i}");
                i += 1;
                let mut tx = pool.begin().await?;
                intake
                    .submit(
                        &mut tx,
                        NewIntent::new("bench", key.clone(), "noop", json!({"n": i})),
                    )
                    .await?;
                tx.commit().await?;
                committed.push((key, Instant::now()));
            }
            Ok::<_, anyhow::Error>(committed)
        }));
    }
    let mut committed = Vec::new();
    for t in tasks {
        committed.extend(t.await.context("submitter panicked")??);
    }
    let paced_secs = a.seconds as f64;
    let wait_from = Instant::now();
    while outbox_left(&pool).await? > 0 && wait_from.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worker.stop().await?;
    let arrivals: HashMap<String, Instant> = receiver
        .seen()
        .into_iter()
        .filter(|s| s.executed)
        .map(|s| (s.key, s.at))
        .collect();
    let mut latencies: Vec<f64> = committed
        .iter()
        .filter_map(|(k, t)| {
            arrivals
                .get(k)
                .map(|a| a.saturating_duration_since(*t).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .copied()
    };
    let achieved = committed.len() as f64 / paced_secs;

    // 3. The raw baseline: shared/bench/cycle.sql by pgbench over a filled backlog.
    let raw = raw_delivery_rps(a, scratch, &pool).await?;
    let ratio = raw.map(|r| rate / r);
    if json_out {
        println!(
            "{}",
            json!({
                "benchmark": "deliver", "intents": a.intents, "concurrency": a.concurrency,
                "deliveries_per_second": rate, "drain_seconds": drain,
                "latency": {"target_rate": target, "achieved_rate": achieved, "samples": latencies.len(),
                            "p50_ms": pct(0.5), "p99_ms": pct(0.99)},
                "raw_delivery_rps": raw, "ratio_to_raw": ratio,
            })
        );
    } else {
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
        println!(
            "deliver: backlog of {} intents, one worker, concurrency {}",
            a.intents, a.concurrency
        );
        println!("  oncebox deliveries/s (HTTP, key-honouring no-op receiver)  {rate:>9.0}");
        match raw {
            Some(r) => {
                println!("  raw claim(100)+complete cycle, pgbench, 2 clients          {r:>9.0}");
                println!(
                    "  ratio oncebox / raw                                        {:>9.2}",
                    rate / r
                );
            }
            None => println!(
                "  (raw baseline skipped: pgbench or {} not found)",
                a.baseline_dir.display()
            ),
        }
        println!(
            "  end to end at {achieved:.0}/s (target {target:.0}/s, {} samples): p50 {} ms, p99 {} ms",
            latencies.len(),
            ms(pct(0.5)),
            ms(pct(0.99))
        );
    }
    Ok(())
}

/// baseline.sh's delivery figure: fill a backlog, run cycle.sql with 2 pgbench clients for
/// `--seconds`, count the rows completed.
async fn raw_delivery_rps(
    a: &DeliverBenchArgs,
    scratch: &ScratchDb,
    pool: &PgPool,
) -> Result<Option<f64>, CliError> {
    let dir = &a.baseline_dir;
    let (setup, fill, cycle) = (
        dir.join("setup.sql"),
        dir.join("fill.sql"),
        dir.join("cycle.sql"),
    );
    if !(pgbench_available() && setup.exists() && fill.exists() && cycle.exists()) {
        return Ok(None);
    }
    let psql = |file: &std::path::Path, vars: &[String]| {
        let mut c = std::process::Command::new("psql");
        c.args(["-q", "-X", &scratch.url, "-f"])
            .arg(file)
            .args(vars.iter().flat_map(|v| ["-v", v.as_str()]));
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c.status()
    };
    psql(&setup, &[]).context("psql setup.sql")?;
    psql(&fill, &[format!("rows={}", a.baseline_rows)]).context("psql fill.sql")?;
    let count = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM baseline_outbox")
            .fetch_one(pool)
            .await
    };
    let start = count().await?;
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
    if !out.status.success() {
        return Err(CliError::Other(anyhow::anyhow!(
            "pgbench failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let left = count().await?;
    if left == 0 {
        eprintln!("raw baseline drained its backlog early: raise --baseline-rows");
    }
    Ok(Some((start - left) as f64 / a.seconds as f64))
}

/// Confirms allowed in flight, on both sides of the AMQP comparison.
const CONFIRM_WINDOW: usize = 256;

async fn measure_amqp(a: &DeliverBenchArgs, scratch: &ScratchDb, json_out: bool) -> CliResult {
    use lapin::options::{
        BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
    };
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

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
    ))
    .map_err(|e| CliError::Other(anyhow::anyhow!("{e}")))?;
    let routes =
        Routes::from_config(&config, Some(&a.amqp_url)).map_err(|e| CliError::Other(e.into()))?;
    let pool = oncebox_store::connect_worker(&scratch.url, 24, Duration::from_secs(5))
        .await
        .map_err(|e| CliError::Other(e.into()))?;
    let (drain, worker) = drain_backlog(&pool, &routes, a.concurrency, a.intents).await?;
    let ours = a.intents as f64 / drain;
    worker.stop().await?;

    // The raw loop: the same body and properties, persistent, at most CONFIRM_WINDOW unconfirmed.
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .context("confirms")?;
    let body = br#"{"n":1}"#;
    let started = Instant::now();
    let mut pending: std::collections::VecDeque<lapin::PublisherConfirm> =
        std::collections::VecDeque::with_capacity(CONFIRM_WINDOW);
    for i in 0..a.intents {
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
                queue.as_str().into(),
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
    let raw = a.intents as f64 / started.elapsed().as_secs_f64();
    let _ = channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    let _ = conn.close(200, "done".into()).await;
    if json_out {
        println!(
            "{}",
            json!({"benchmark": "deliver-amqp", "intents": a.intents, "concurrency": a.concurrency,
                   "deliveries_per_second": ours, "raw_publish_confirm_per_second": raw, "ratio_to_raw": ours / raw})
        );
    } else {
        println!(
            "deliver --amqp: backlog of {} intents, one worker, concurrency {}, confirm window {CONFIRM_WINDOW}",
            a.intents, a.concurrency
        );
        println!("  oncebox deliveries/s (publisher confirms, persistent)   {ours:>9.0}");
        println!("  raw lapin publisher-confirm loop, same message/window   {raw:>9.0}");
        println!(
            "  ratio oncebox / raw                                     {:>9.2}",
            ours / raw
        );
    }
    Ok(())
}
