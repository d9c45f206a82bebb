//! One worker: its services started under a supervisor, and stopped in order.

use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, InFlight};
use crate::metrics::Metrics;
use crate::routes::Routes;
use crate::service::{ServiceFailed, Stage, Supervisor};
use crate::services::ask::Asker;
use crate::services::claimer::Claimer;
use crate::services::completer::Completer;
use crate::services::dead_letter::Notifier;
use crate::services::gauges::Gauges;
use crate::services::reconciler::Reconciler;
use crate::services::renewer::Renewer;
use crate::services::wakeup::Wakeup;
use crate::settings::WorkerSettings;

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The settings cannot work.
    #[error("{0}")]
    Settings(String),
    /// The database failed in a way the worker does not ride out (start-up).
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// A service panicked or ended early; the worker stopped the others and exits.
    #[error(transparent)]
    Service(#[from] ServiceFailed),
}

/// Runs one worker until `cancel`, then finishes or releases its in-flight work within the
/// grace period and returns.
///
/// # Errors
/// [`WorkerError::Settings`] when the lease does not exceed every destination timeout by the
/// margin, or a lookup destination's consistency window does not cover the lease and its
/// timeout ([`Routes::check_windows`]); [`WorkerError::Database`] when the LISTEN connection cannot be opened at start-up;
/// [`WorkerError::Service`] when one of its services panicked or ended while it should have
/// been running (the others are stopped first, as on a cancellation). Database errors later are
/// logged and ridden out (polling, retries); leases protect the work meanwhile.
pub async fn run(
    pool: PgPool,
    routes: Routes,
    settings: WorkerSettings,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) -> Result<(), WorkerError> {
    settings
        .check(routes.longest_timeout())
        .and_then(|()| routes.check_windows(settings.lease()))
        .map_err(WorkerError::Settings)?;
    let wakeup = match settings.deliver {
        true => Some(Wakeup::connect(&pool).await?),
        false => None,
    };
    if settings.amqp_url.is_none() {
        tracing::warn!("no AMQP URL: dead letters are queued in the outbox but not published");
    }
    let capacity = settings.concurrency.get().max(16) * 2;
    let amqp_url = settings.amqp_url.clone();
    let id = settings.id.clone();
    let ctx = Arc::new(Context {
        pool,
        routes,
        settings,
        metrics,
        in_flight: InFlight::default(),
        breakers: crate::breaker::Breakers::default(),
        delivering_workers: std::sync::atomic::AtomicU32::new(1),
    });
    let (completer, outcomes) = Completer::new(capacity);
    let mut supervisor = Supervisor::new(ctx, cancel);
    supervisor.spawn(Stage::Drain, completer);
    supervisor.spawn(Stage::Background, Renewer);
    supervisor.spawn(Stage::Background, Gauges);
    if let Some(url) = amqp_url {
        supervisor.spawn(Stage::Front, Notifier::new(url));
    }
    supervisor.spawn(Stage::Front, Reconciler::new(outcomes.clone()));
    supervisor.spawn(Stage::Front, Asker);
    match wakeup {
        Some(wakeup) => supervisor.spawn(Stage::Front, Claimer::new(outcomes, wakeup)),
        None => {
            tracing::info!(worker = %id, "reconciliation and dead letters only: no deliveries claimed");
            drop(outcomes);
        }
    }
    tracing::info!(worker = %id, "worker started");
    supervisor.wait().await?;
    tracing::info!(worker = %id, "worker stopped");
    Ok(())
}
