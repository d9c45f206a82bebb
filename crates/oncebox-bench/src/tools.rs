//! `oncebox-bench tools`: MCP tool calls per second through `/mcp` — each call submitting an
//! intent and waiting for it to settle at a no-op receiver — against the same work through the
//! HTTP API (`POST /v1/intents` then `GET /v1/intents/{key}?wait=`), in the same run: one
//! in-process `oncebox serve` (with `/mcp`), one in-process worker, one key-honouring receiver
//! that answers at once; the two cases alternate in every round.

use std::time::{Duration, Instant};

use anyhow::Context;
use oncebox_client::{Client, RetryConfig, Submit};
use oncebox_store::scratch::ScratchDb;
use oncebox_worker::Routes;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, MetaObject, RequestMetaObject};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::ToolsArgs;
use crate::stats::{Figure, median, print_figures};

/// Runs the tool-call benchmark in a scratch database of its own.
pub(crate) async fn run(a: ToolsArgs, json_out: bool) -> anyhow::Result<()> {
    crate::in_scratch(&a.database_url, "tools", async |scratch| {
        rounds(&a, scratch, json_out).await
    })
    .await
}

async fn rounds(a: &ToolsArgs, scratch: &ScratchDb, json_out: bool) -> anyhow::Result<()> {
    let (receiver, config) =
        crate::harness::noop_sink("tool = { description = \"Do nothing, once.\" }\n", "").await?;
    let pool =
        oncebox_store::connect_worker(&scratch.url, a.clients * 2 + 16, Duration::from_secs(5))
            .await?;
    let routes = Routes::from_config(&config, None)?;
    let worker = crate::harness::start_worker(&pool, &routes, 256)
        .await
        .check_alive()
        .await?;
    let (base, token, stop, server) = crate::intake_http::start_api(&pool, &config).await?;
    let secs = Duration::from_secs(a.seconds);
    let clients = a.clients as usize;
    // No retries: a failed call fails the benchmark rather than hiding in its figure.
    let http = Client::new(&base, &token)?.with_retry(RetryConfig {
        max_attempts: 1,
        ..RetryConfig::default()
    });
    let (mut mcp, mut api) = (Vec::new(), Vec::new());
    for round in 0..a.rounds as usize {
        mcp.push(measure_mcp(&base, &token, clients, secs, round).await?);
        api.push(measure_api(&http, clients, secs, round).await?);
        if !json_out {
            eprintln!(
                "round {}: /mcp {:.0} calls/s, HTTP API {:.0}/s",
                round + 1,
                mcp[round].per_second,
                api[round].per_second
            );
        }
    }
    stop.cancel();
    server.await.context("the API server panicked")?;
    worker.stop().await?;
    let (mcp_m, api_m) = (median(&mcp), median(&api));
    let ratio = mcp_m.per_second / api_m.per_second;
    if json_out {
        println!(
            "{}",
            json!({
                "benchmark": "tools", "clients": a.clients, "seconds": a.seconds,
                "rounds": a.rounds, "mcp": mcp_m, "http_api": api_m, "ratio_to_http_api": ratio,
                "rounds_detail": {"mcp": mcp, "http_api": api},
                "effects": receiver.total_effects(),
            })
        );
    } else {
        print_figures(
            &format!(
                "tool calls settled at a no-op receiver: {} clients, {} s x {} rounds; medians",
                a.clients, a.seconds, a.rounds
            ),
            52,
            &[
                ("/mcp tools/call (rmcp client, streamable HTTP)", mcp_m),
                ("POST /v1/intents + GET ?wait= (oncebox-client)", api_m),
            ],
        );
        println!("  ratio /mcp / HTTP API:  {ratio:.2}");
    }
    Ok(())
}

/// `clients` MCP sessions calling the tool for `secs`, each call under a new key.
async fn measure_mcp(
    base: &str,
    token: &str,
    clients: usize,
    secs: Duration,
    round: usize,
) -> anyhow::Result<Figure> {
    let start = Instant::now();
    let end = start + secs;
    let mut tasks = Vec::with_capacity(clients);
    for c in 0..clients {
        let config =
            StreamableHttpClientTransportConfig::with_uri(format!("{base}/mcp")).auth_header(token);
        // rmcp's default client opens a new connection for every request (it turns off idle
        // pooling); agents' HTTP clients keep connections, as oncebox-client does on the other
        // side of this comparison, so each session here keeps its own.
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .build()
            .context("HTTP client")?;
        let client =
            ().serve(StreamableHttpClientTransport::with_client(http, config))
                .await
                .context("MCP initialize")?;
        tasks.push(tokio::spawn(async move {
            let mut latencies: Vec<u32> = Vec::with_capacity(16 * 1024);
            let mut i = 0u64;
            while Instant::now() < end {
                let key = format!("mcp-{round}-{c}-{i}");
                i += 1;
                let mut call = CallToolRequestParams::new("noop").with_arguments(arguments(i));
                let meta = json!({"oncebox.dev/idempotency_key": key});
                let meta = meta.as_object().cloned().unwrap_or_default();
                call.meta = Some(RequestMetaObject(MetaObject(meta)));
                let t = Instant::now();
                let result = client.call_tool(call).await?;
                let status = result
                    .structured_content
                    .as_ref()
                    .and_then(|s| s.get("status"))
                    .and_then(Value::as_str);
                anyhow::ensure!(status == Some("succeeded"), "call {key}: {result:?}");
                latencies.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
            }
            client.cancel().await.ok();
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    crate::stats::collect(tasks, start).await
}

/// `clients` tasks submitting over the HTTP API and long-polling each intent until settled.
async fn measure_api(
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
            let mut latencies: Vec<u32> = Vec::with_capacity(16 * 1024);
            let mut i = 0u64;
            while Instant::now() < end {
                let key = format!("api-{round}-{c}-{i}");
                i += 1;
                let request = Submit::new("noop", Value::Object(arguments(i)));
                let t = Instant::now();
                client.submit(&key, &request).await?;
                let intent = client.wait(&key, Duration::from_secs(30)).await?;
                anyhow::ensure!(
                    intent.status == oncebox_core::Status::Succeeded,
                    "intent {key}: {:?}",
                    intent.status
                );
                latencies.push(u32::try_from(t.elapsed().as_micros()).unwrap_or(u32::MAX));
            }
            Ok::<_, anyhow::Error>(latencies)
        }));
    }
    crate::stats::collect(tasks, start).await
}

fn arguments(i: u64) -> serde_json::Map<String, Value> {
    let value = json!({"order_id": format!("order-{i}"), "amount": "12500.00"});
    value.as_object().cloned().unwrap_or_default()
}
