//! `oncebox worker`: one delivery worker process.

use std::num::NonZeroUsize;
use std::sync::Arc;

use clap::Args as ClapArgs;
use oncebox_core::duration::{HumanDuration, NonZeroDuration};
use oncebox_worker::{Metrics, Probes, Routes, WorkerError, WorkerSettings};
use tokio_util::sync::CancellationToken;

use super::args::{ConfigArgs, DbArgs, DeadLetterArgs, HttpLimitArgs, SchemaGuard};
use super::wait_for_signal;
use crate::exit::{CliError, CliResult};

/// Run a delivery worker: claim outbox rows, deliver them with their key, record outcomes.
/// Stops on SIGTERM or SIGINT after finishing (or releasing) in-flight work; exit 0.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// Deliveries in flight at once.
    #[arg(long, default_value_t = WorkerSettings::default().concurrency)]
    pub(crate) concurrency: NonZeroUsize,
    /// This worker's name (lease owner, logs, retry report); default host-pid. In Kubernetes,
    /// the pod name.
    #[arg(long, env = "ONCEBOX_WORKER_ID")]
    pub(crate) id: Option<String>,
    #[command(flatten)]
    pub(crate) schema: SchemaGuard,
    /// Serve Prometheus metrics at http://ADDR/metrics, with the probes /healthz (503 when a
    /// loop has not turned for 3 leases) and /readyz (503 when the database does not answer),
    /// e.g. 127.0.0.1:9187.
    #[arg(long)]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// Limits of the probe server on --metrics-addr.
    #[command(flatten)]
    pub(crate) http: HttpLimitArgs,
    /// Lease length; must exceed every destination timeout by 2 s (e.g. "30s").
    #[arg(long, default_value_t = WorkerSettings::default().lease)]
    pub(crate) lease: NonZeroDuration,
    /// Poll for work this often when no notification arrives (e.g. "500ms").
    #[arg(long, default_value_t = WorkerSettings::default().poll_interval)]
    pub(crate) poll_interval: NonZeroDuration,
    /// While the pool's new work arrives slower than this many intents per second, stay
    /// registered as waiting so that each submit wakes this worker with NOTIFY at its commit;
    /// at or above it, poll every --busy-poll instead, so that submits do not pay for NOTIFY's
    /// cluster-wide commit lock. 0: notify only after a second without work.
    #[arg(long, default_value_t = WorkerSettings::default().notify_below)]
    pub(crate) notify_below: u32,
    /// Above --notify-below, look for work again this soon after an empty claim (e.g. "2ms").
    #[arg(long, default_value_t = WorkerSettings::default().busy_poll)]
    pub(crate) busy_poll: NonZeroDuration,
    /// On SIGTERM, wait this long for in-flight deliveries before releasing them.
    #[arg(long, default_value_t = HumanDuration(WorkerSettings::default().grace))]
    pub(crate) grace: HumanDuration,
    /// Rows per claim, at most.
    #[arg(long, default_value_t = WorkerSettings::default().batch)]
    pub(crate) batch: NonZeroUsize,
    #[command(flatten)]
    pub(crate) dead_letters: DeadLetterArgs,
    /// Run only reconciliation (and dead-letter publishing): claim no deliveries.
    #[arg(long)]
    pub(crate) reconcile_only: bool,
    /// Where people open the console (e.g. https://ops.example.com): approval requests link to
    /// the intent's page there; without it they carry only the page's path.
    #[arg(long, env = "ONCEBOX_CONSOLE_URL", value_parser = console_url)]
    pub(crate) console_url: Option<String>,
}

/// A console address: http(s), without query, fragment, spaces or control characters; any
/// trailing slash dropped (the intent's path follows it).
fn console_url(text: &str) -> Result<String, String> {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"))
        .ok_or("must start with http:// or https://")?;
    if rest.is_empty() || rest.starts_with('/') {
        return Err("names no host".into());
    }
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '?' | '#' | '"' | '<' | '>'))
    {
        return Err(format!(
            "may not hold {c:?}: give the console's address only"
        ));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

/// Postgres connections of a worker's pool: dispatch marks, up to three batched records, lease
/// renewal, reconciliation, dead letters, the gauges and the LISTEN connection share them. The
/// delivery claimer takes one more out of it for its own session (the pool opens another in its
/// place): 8 in all.
const WORKER_CONNECTIONS: u32 = 7;

/// Runs one worker until SIGTERM or SIGINT, then finishes or releases its in-flight work.
pub(crate) async fn run(args: Args) -> CliResult {
    let mut config = args.config.load()?;
    config
        .resolve_env(|name| std::env::var(name).ok())
        .map_err(|e| CliError::usage(e.field.clone(), e.to_string()))?;
    let routes = Routes::from_config(&config, args.dead_letters.amqp_url.as_deref())
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
        amqp_url: args.dead_letters.amqp_url,
        dead_letter_exchange: args.dead_letters.dead_letter_exchange,
        deliver: !args.reconcile_only,
        console_url: args.console_url,
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
    .map_err(|e| super::connect_error(&args.db.database_url, &e))?;
    args.schema.check(&pool).await?;
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
        wait_for_signal().await;
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

#[cfg(test)]
mod tests {
    use super::console_url;

    #[test]
    fn a_console_address_is_http_with_a_host_and_nothing_after_its_path() {
        assert_eq!(
            console_url("https://ops.example.com/").as_deref(),
            Ok("https://ops.example.com")
        );
        assert_eq!(
            console_url("http://10.0.0.5:8080/oncebox").as_deref(),
            Ok("http://10.0.0.5:8080/oncebox")
        );
        for (bad, says) in [
            ("ops.example.com", "http://"),
            ("ftp://ops.example.com", "http://"),
            ("https://", "no host"),
            ("https:///console", "no host"),
            ("https://ops.example.com/?a=1", "'?'"),
            ("https://ops.example.com/#x", "'#'"),
            ("https://ops.example.com/a b", "' '"),
            ("https://ops.example.com/\0", "'\\0'"),
        ] {
            let e = console_url(bad).expect_err(bad);
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
