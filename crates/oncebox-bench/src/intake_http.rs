//! `oncebox-bench intake --http`: intents/s through the HTTP API — an in-process `oncebox serve`
//! on loopback, `--clients` tasks posting with `oncebox-client` — against the raw pgbench
//! intake of `baseline/intake.sql` in the same run, in alternating rounds.

use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_client::{Client, RetryConfig, Submit};
use oncebox_core::config::Config;
use oncebox_store::scratch::ScratchDb;
use serde_json::json;

use crate::IntakeArgs;
use crate::baseline::{Scripts, pgbench_available};
use crate::intake::{Load, measure, reset, run_pgbench};
use crate::stats::{Figure, median, print_figures};

/// Runs the HTTP intake benchmark in a scratch database of its own.
pub(crate) async fn run(a: IntakeArgs, json: bool) -> anyhow::Result<()> {
    crate::in_scratch(&a.database_url, "http", async |scratch| {
        intake_rounds(&a, scratch, json).await
    })
    .await
}

async fn intake_rounds(a: &IntakeArgs, scratch: &ScratchDb, json: bool) -> anyhow::Result<()> {
    // The API gets what `oncebox serve` would need for this many clients: one connection each,
    // plus the LISTEN connection for long-polls.
    let pool = scratch.pool(a.clients + 2).await?;
    sqlx::raw_sql(crate::baseline::SETUP).execute(&pool).await?;
    let config = Config::from_toml(
        "[actions.create_invoice]\ndestination = \"d\"\n[destinations.d]\nkind = \"http\"\n\
         url = \"http://127.0.0.1:9/\"\nidempotency = \"key\"\n",
    )?;
    let (base, token, stop, server) = start_api(&pool, &config).await?;
    // No retries: a failed request fails the benchmark rather than hiding in its figure.
    let client = Client::new(&base, &token)?.with_retry(RetryConfig {
        max_attempts: 1,
        ..RetryConfig::default()
    });
    let scripts = Scripts::new(a.baseline.baseline_dir.as_deref())?;
    let pgbench_script = scripts.get("intake.sql").filter(|_| pgbench_available());
    let secs = Duration::from_secs(a.seconds);
    let clients = a.clients as usize;

    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for round in 0..a.rounds as usize {
        reset(&pool).await?;
        ours.push(measure_http(&client, clients, secs, round).await?);
        reset(&pool).await?;
        raw.push(match &pgbench_script {
            Some(script) => run_pgbench(script, &scratch.url, clients, a.seconds).await?,
            None => measure(&pool, Load::RawSql, clients, secs, round).await?,
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
    stop.cancel();
    server.await.context("the API server panicked")?;
    let (ours_m, raw_m) = (median(&ours), median(&raw));
    let ratio = ours_m.per_second / raw_m.per_second;
    let baseline = if pgbench_script.is_some() {
        "raw pgbench baseline/intake.sql (intake_tps)"
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
        print_figures(
            &format!(
                "intake over HTTP: {} clients, {} s x {} rounds; medians",
                a.clients, a.seconds, a.rounds
            ),
            50,
            &[
                ("POST /v1/intents (oncebox-client, keep-alive)", ours_m),
                (baseline, raw_m),
            ],
        );
        println!("  ratio HTTP API / raw:  {ratio:.2}");
    }
    Ok(())
}

/// An in-process `oncebox serve` on a loopback port for the actions of `config`, with `/mcp`
/// (tool calls wait up to 30 s) and an agent token of `tenant-42`: its base URL, the token, the
/// token that stops it and its task.
pub(crate) async fn start_api(
    pool: &sqlx::PgPool,
    config: &Config,
) -> anyhow::Result<(
    String,
    String,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
)> {
    let (_, token) = oncebox_store::tokens::create_token(
        pool,
        oncebox_store::tokens::NewToken {
            label: Some("bench"),
            ..oncebox_store::tokens::NewToken::new("tenant-42", oncebox_store::tokens::Role::Agent)
        },
    )
    .await?;
    let intake =
        oncebox_store::Intake::new(config, None).context("the benchmark's actions hash nothing")?;
    // Rate limits checked on every request, as in production, but set far above what one
    // token sends here: the figure includes the limiter's cost, never its refusals.
    let far = oncebox_api::limits::Rate {
        per_second: 1e9,
        burst: 1e9,
    };
    let state = oncebox_api::AppState::new(
        pool.clone(),
        intake.clone(),
        oncebox_api::DEFAULT_BODY_LIMIT,
    )
    .await?
    .with_rate_limits(oncebox_api::limits::RateLimits {
        per_token: far,
        per_tenant: far,
        ..oncebox_api::limits::RateLimits::default()
    });
    let gateway = oncebox_mcp::Gateway::new(
        pool.clone(),
        config,
        intake,
        Duration::from_secs(30),
        oncebox_mcp::Tenancy::PerRequest,
        state.settled(),
    );
    let mcp = oncebox_api::McpMount {
        gateway,
        allowed_hosts: Vec::new(),
        allowed_origins: Vec::new(),
        max_sessions: oncebox_api::DEFAULT_MAX_SESSIONS,
        max_sessions_per_token: oncebox_api::DEFAULT_MAX_SESSIONS_PER_TOKEN,
        max_sessions_per_tenant: oncebox_api::DEFAULT_MAX_SESSIONS_PER_TENANT,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .context("cannot bind a loopback port")?;
    let addr = listener.local_addr().context("no local address")?;
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(oncebox_serve::serve(
        listener,
        oncebox_api::router_with_mcp(state, Some(mcp)),
        oncebox_serve::Limits::default(),
        stop.clone().cancelled_owned(),
    ));
    Ok((format!("http://{addr}"), token, stop, server))
}

/// `clients` tasks posting new intents for `secs`; the rate of 202s and their latency.
async fn measure_http(
    client: &Client,
    clients: usize,
    secs: Duration,
    round: usize,
) -> anyhow::Result<Figure> {
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
    crate::stats::collect(tasks, start).await
}
