//! The gauges service: every few seconds it reads into the metrics the ready queue's depth and
//! the age of its oldest row (a bounded count over the ready index), the intents waiting for
//! reconciliation or a person per status, the dead letters not yet published and the circuit
//! breakers, and the ordering lanes blocked by a failed head; records this worker as seen
//! (`oncebox.workers`, the console's list of workers) and learns how many workers deliver (the
//! wake-up policy's estimate of the pool's rate); and runs the ordering lanes' repair sweep
//! ([`oncebox_store::lanes::repair`]).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::service::Service;

/// How often the gauges are read.
const PERIOD: Duration = Duration::from_secs(5);

/// The queue and waiting gauges.
pub(crate) struct Gauges;

impl Service for Gauges {
    const NAME: &'static str = "gauges";

    async fn run(self, ctx: Arc<Context>, stop: CancellationToken) {
        loop {
            crate::crash::panic_in(Self::NAME);
            match oncebox_store::ready_queue(&ctx.pool).await {
                Ok(q) => ctx.metrics.ready(
                    u64::try_from(q.depth).unwrap_or(0),
                    (q.oldest_seconds.max(0.0) * 1000.0) as u64,
                ),
                Err(e) => tracing::warn!(error = %e, "reading the ready-queue gauges failed"),
            }
            // Seen by the console's list of workers.
            let (id, delivers) = (&ctx.settings.id, ctx.settings.deliver);
            match oncebox_store::console::worker_seen(&ctx.pool, id, delivers).await {
                Ok(n) => ctx.set_delivering_workers(n),
                Err(e) => tracing::warn!(error = %e, "recording this worker as seen failed"),
            }
            match oncebox_store::breaker::states(&ctx.pool).await {
                Ok(states) => ctx.metrics.breakers(&states),
                Err(e) => tracing::warn!(error = %e, "reading the circuit breakers failed"),
            }
            match oncebox_store::lanes::blocked(&ctx.pool).await {
                Ok(n) => ctx.metrics.lanes_blocked(u64::try_from(n).unwrap_or(0)),
                Err(e) => tracing::warn!(error = %e, "reading the blocked lanes failed"),
            }
            match oncebox_store::lanes::repair(&ctx.pool).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(lanes = n, "repaired ordering lanes"),
                Err(e) => tracing::warn!(error = %e, "the ordering lanes' repair sweep failed"),
            }
            match oncebox_store::waiting_gauges(&ctx.pool).await {
                Ok(gauges) => ctx.metrics.waiting(&gauges),
                Err(e) => tracing::warn!(error = %e, "reading the waiting gauges failed"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(PERIOD) => {}
            }
        }
    }
}
