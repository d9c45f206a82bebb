//! `oncebox worker`: one delivery worker process.

use std::sync::Arc;

use oncebox_worker::{Metrics, Routes, WorkerSettings};
use tokio_util::sync::CancellationToken;

use crate::cli::WorkerArgs;
use crate::commands::load_config;
use crate::exit::{CliError, CliResult};

pub(crate) async fn run(args: WorkerArgs) -> CliResult {
    let mut config = load_config(&args.config)?;
    config
        .resolve_env(|name| std::env::var(name).ok())
        .map_err(|e| CliError::usage(e.field.clone(), e.to_string()))?;
    let routes = Routes::from_config(&config, args.amqp_url.as_deref())
        .map_err(|e| CliError::usage("destinations", e.to_string()))?;
    if args.concurrency == 0 || args.batch == 0 {
        return Err(CliError::usage(
            "concurrency",
            "--concurrency and --batch must be at least 1",
        ));
    }
    let id = args.id.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    // Claims, dispatch marks, records, renewals and the LISTEN connection each take a connection.
    let pool =
        oncebox_store::connect_worker(&args.db.database_url, 8, std::time::Duration::from_secs(5))
            .await
            .map_err(|e| {
                CliError::Other(anyhow::Error::new(e).context("cannot connect to DATABASE_URL"))
            })?;
    let metrics = Arc::new(Metrics::default());
    let cancel = CancellationToken::new();
    if let Some(addr) = args.metrics_addr {
        // A loop turns at least every poll interval, or when a delivery or lookup (each shorter
        // than the lease) ends, or a database call fails (acquiring waits at most 5 s): three
        // leases without a turn means it is stuck.
        let probes = oncebox_worker::Probes {
            stuck_after: args.lease * 3 + args.poll_interval,
            database: Some((*pool.connect_options()).clone()),
        };
        let bound = metrics
            .clone()
            .serve(addr, probes, cancel.clone())
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
    let settings = WorkerSettings {
        id,
        concurrency: args.concurrency,
        batch: args.batch,
        lease: args.lease,
        poll_interval: args.poll_interval,
        grace: args.grace,
        amqp_url: args.amqp_url,
        dead_letter_exchange: args.dead_letter_exchange,
        deliver: !args.reconcile_only,
        ..WorkerSettings::default()
    };
    oncebox_worker::run(pool, routes, settings, metrics, cancel)
        .await
        .map_err(|e| match e {
            oncebox_worker::WorkerError::Settings(m) => CliError::usage("lease", m),
            other => CliError::Other(other.into()),
        })
}
