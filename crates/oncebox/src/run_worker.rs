//! `oncebox worker`: one delivery worker process.

use std::sync::Arc;

use oncebox_worker::{Metrics, Probes, Routes, WorkerError, WorkerSettings};
use tokio_util::sync::CancellationToken;

use crate::cli::WorkerArgs;
use crate::commands::load_config;
use crate::exit::{CliError, CliResult};

/// Postgres connections of a worker's pool: dispatch marks, up to three batched records, lease
/// renewal, reconciliation, dead letters, the gauges and the LISTEN connection share them. The
/// delivery claimer takes one more out of it for its own session (the pool opens another in its
/// place): 8 in all.
const WORKER_CONNECTIONS: u32 = 7;

pub(crate) async fn run(args: WorkerArgs) -> CliResult {
    let mut config = load_config(&args.config)?;
    config
        .resolve_env(|name| std::env::var(name).ok())
        .map_err(|e| CliError::usage(e.field.clone(), e.to_string()))?;
    let routes = Routes::from_config(&config, args.amqp_url.as_deref())
        .map_err(|e| CliError::usage("destinations", e.to_string()))?;
    let settings = WorkerSettings {
        id: args.id.unwrap_or_else(default_id),
        concurrency: args.concurrency,
        batch: args.batch,
        lease: args.lease,
        poll_interval: args.poll_interval,
        busy_poll: args.busy_poll,
        notify_below: args.notify_below,
        grace: args.grace.get(),
        amqp_url: args.amqp_url,
        dead_letter_exchange: args.dead_letter_exchange,
        deliver: !args.reconcile_only,
        ..WorkerSettings::default()
    };
    settings
        .check(routes.longest_timeout())
        .map_err(|m| CliError::usage("lease", m))?;
    let pool = oncebox_store::connect_worker(
        &args.db.database_url,
        WORKER_CONNECTIONS,
        std::time::Duration::from_secs(5),
    )
    .await
    .map_err(|e| {
        CliError::Other(anyhow::Error::new(e).context("cannot connect to DATABASE_URL"))
    })?;
    if !args.allow_newer_schema {
        oncebox_store::refuse_newer_schema(&pool).await?;
    }
    let metrics = Arc::new(Metrics::default());
    let cancel = CancellationToken::new();
    if let Some(addr) = args.metrics_addr {
        // A loop turns at least every poll interval, or when a delivery or lookup (each shorter
        // than the lease) ends, or a database call fails (acquiring waits at most 5 s): three
        // leases without a turn means it is stuck.
        let probes = Probes {
            stuck_after: settings.lease() * 3 + settings.poll_interval(),
            database: Some((*pool.connect_options()).clone()),
            limits: args.http.limits(),
        };
        let bound = oncebox_worker::serve_probes(metrics.clone(), addr, probes, cancel.clone())
            .await
            .map_err(|e| {
                CliError::usage("metrics_addr", format!("cannot listen on {addr}: {e}"))
            })?;
        tracing::info!(%bound, "metrics at /metrics");
    }
    let stop = cancel.clone();
    tokio::spawn(async move {
        crate::commands::wait_for_signal().await;
        tracing::info!("signal received: stopping");
        stop.cancel();
    });
    oncebox_worker::run(pool, routes, settings, metrics, cancel)
        .await
        .map_err(|e| match e {
            WorkerError::Settings(m) => CliError::usage("lease", m),
            other => CliError::Other(other.into()),
        })
}

/// `host-pid`: unique per process on a machine.
fn default_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    format!("{}-{}", host.trim(), std::process::id())
}
