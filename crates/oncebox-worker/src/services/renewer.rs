//! The lease renewer: every third of the lease it extends the leases of the calls under way, and
//! abandons the calls whose lease was taken over, so that they write nothing.

use std::collections::HashSet;
use std::sync::Arc;

use oncebox_store::Phase;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::service::Service;

/// The lease renewer.
pub(crate) struct Renewer;

impl Service for Renewer {
    const NAME: &'static str = "renewer";

    async fn run(self, ctx: Arc<Context>, stop: CancellationToken) {
        let period = ctx.settings.lease() / 3;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            crate::crash::panic_in(Self::NAME);
            renew_once(&ctx).await;
        }
    }
}

async fn renew_once(ctx: &Context) {
    let held = ctx.in_flight.leases();
    if held.is_empty() {
        return;
    }
    let settings = &ctx.settings;
    let renewed = oncebox_store::renew(
        &ctx.pool,
        &settings.id,
        Phase::Deliver,
        &held,
        settings.lease(),
    )
    .await;
    match renewed {
        Ok(ids) => {
            let kept: HashSet<i64> = ids.into_iter().collect();
            let lost = ctx.in_flight.abandon_lost(&held, &kept);
            if lost > 0 {
                ctx.metrics.leases_lost(lost);
                tracing::warn!(lost, "leases taken over: calls abandoned, nothing written");
            }
        }
        Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying next period"),
    }
}
