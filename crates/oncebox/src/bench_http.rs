//! `oncebox bench intake --http`: intents/s through the HTTP API — an in-process `oncebox serve`
//! on loopback, `--clients` tasks posting with `oncebox-client` — against the raw pgbench
//! intake of `shared/bench` in the same run, in alternating rounds.

use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_client::{Client, RetryConfig, Submit};
use serde_json::json;

use crate::bench::{Figure, Load, measure, median, pgbench_available, reset, run_pgbench};
use crate::cli::IntakeBenchArgs;
use crate::exit::{CliError, CliResult};
use crate::scratch::ScratchDb;

pub(crate) async fn intake_rounds(
    a: &IntakeBenchArgs,
    scratch: &ScratchDb,
    json: bool,
) -> CliResult {
    // The API gets what `oncebox serve` would need for this many clients: one connection each,
    // plus the LISTEN connection for long-polls.
    let pool = scratch
        .pool(u32::try_from(a.clients + 2).unwrap_or(u32::MAX))
        .await?;
    sqlx::raw_sql(crate::bench::BASELINE_SETUP)
        .execute(&pool)
        .await?;
    let token = oncebox_store::tokens::create_token(
        &mut *pool.acquire().await?,
        "tenant-42",
        oncebox_store::tokens::Role::Agent,
        Some("bench"),
    )
    .await?;
    let intake = oncebox_store::Intake::from_actions([("create_invoice".to_owned(), vec![])]);
    let state =
        oncebox_api::AppState::new(pool.clone(), intake, oncebox_api::DEFAULT_BODY_LIMIT).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind a loopback port")?;
    let addr = listener.local_addr().context("no local address")?;
    let server =
        tokio::spawn(async move { axum::serve(listener, oncebox_api::router(state)).await });
    // No retries: a failed request fails the benchmark rather than hiding in its figure.
    let client = Client::new(&format!("http://{addr}"), &token)
        .map_err(|e| CliError::Other(e.into()))?
        .with_retry(RetryConfig {
            max_attempts: 1,
            ..RetryConfig::default()
        });
    let pgbench_script = a.baseline_dir.join("intake.sql");
    let pgbench = pgbench_available() && pgbench_script.exists();
    let secs = Duration::from_secs(a.seconds);

    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for round in 0..a.rounds {
        reset(&pool).await?;
        ours.push(measure_http(&client, a.clients, secs, round).await?);
        reset(&pool).await?;
        raw.push(if pgbench {
            run_pgbench(&pgbench_script, &scratch.url, a.clients, a.seconds).await?
        } else {
            measure(&pool, Load::RawSql, a.clients, secs, round).await?
        });
        if !json {
            eprintln!(
                "round {}: HTTP API {:.0}/s, raw {:.0}/s",
                round + 1,
                ours[round].per_second,
                raw[round].per_second
            );
        }
    }
    server.abort();
    let _ = server.await;
    let (ours_m, raw_m) = (median(&ours), median(&raw));
    let ratio = ours_m.per_second / raw_m.per_second;
    let baseline = if pgbench {
        "raw pgbench shared/bench/intake.sql (intake_tps)"
    } else {
        "raw two-insert transaction (pgbench not found)"
    };
    if json {
        println!(
            "{}",
            json!({
                "benchmark": "intake_http", "clients": a.clients, "seconds": a.seconds,
                "rounds": a.rounds, "http_api": ours_m, "baseline": baseline, "raw": raw_m,
                "ratio_to_raw": ratio, "rounds_detail": {"http_api": ours, "raw": raw},
            })
        );
    } else {
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}"));
        println!(
            "intake over HTTP: {} clients, {} s x {} rounds; medians",
            a.clients, a.seconds, a.rounds
        );
        println!(
            "  {:<50} {:>10} {:>8} {:>8}",
            "", "intents/s", "p50 ms", "p99 ms"
        );
        for (name, f) in [
            ("POST /v1/intents (oncebox-client, keep-alive)", &ours_m),
            (baseline, &raw_m),
        ] {
            println!(
                "  {name:<50} {:>10.0} {:>8} {:>8}",
                f.per_second,
                ms(f.p50_ms),
                ms(f.p99_ms)
            );
        }
        println!("  ratio HTTP API / raw:  {ratio:.2}");
    }
    Ok(())
}

/// `clients` tasks posting new intents for `secs`; the rate of 202s and their latency.
async fn measure_http(
    client: &Client,
    clients: usize,
    secs: Duration,
    round: usize,
) -> Result<Figure, CliError> {
    let start = Instant::now();
    let end = start + secs;
    let mut tasks = Vec::with_capacity(clients);
    for c in 0..clients {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::with_capacity(64 * 1024);
            let mut i = 0u64;
            while Instant::now() < end {
                let key = format!("bench-{round}-{c}-{i}");
                i += 1;
                let request = Submit::new(
                    "create_invoice",
                    json!({"order_id": format!("order-{i}"), "amount": "12500.00", "currency": "RUB"}),
                );
                let t = Instant::now();
                let submitted = client.submit(&key, &request).await?;
                anyhow::ensure!(submitted.created, "key {key} was not new");
                latencies.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.context("benchmark client panicked")??);
    }
    Ok(crate::bench::figure(all, start.elapsed()))
}
