//! The reconciler: claims reconcile-phase rows under the same lease and epoch rules as
//! deliveries, moves their intents `unknown → reconciling`, looks each effect up at its
//! destination and sends the decision ([`crate::decide_reconcile`]) to the completer.
//! Reconciliation is not latency-critical: it polls, and each row's `available_at` carries its
//! own backoff.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use oncebox_store::{ClaimedRow, Completion, Lease, Phase};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::decisions::reconcile::{Reconciling, decide_reconcile};
use crate::metrics::{LOOP_RECONCILE, now_ms};
use crate::routes::Route;
use crate::service::Service;
use crate::services::completer::Outcomes;
use crate::services::wakeup::{Next, sleep_or_stop};
use crate::settings::RECONCILE_BATCH;

/// The reconciliation loop.
pub(crate) struct Reconciler {
    outcomes: Outcomes,
}

impl Reconciler {
    /// A reconciler sending its decisions to `outcomes`.
    pub(crate) fn new(outcomes: Outcomes) -> Reconciler {
        Reconciler { outcomes }
    }
}

impl Service for Reconciler {
    const NAME: &'static str = "reconciler";

    async fn run(self, ctx: Arc<Context>, stop: CancellationToken) {
        let settings = &ctx.settings;
        let mut claims = crate::context::PhaseClaims::new(Phase::Reconcile, RECONCILE_BATCH);
        while !stop.is_cancelled() {
            crate::crash::panic_in(Self::NAME);
            ctx.metrics.heartbeat(LOOP_RECONCILE, now_ms());
            let rows = claims.next(&ctx).await;
            if rows.is_empty() {
                if sleep_or_stop(settings.poll_interval(), &stop).await == Next::Stop {
                    break;
                }
                continue;
            }
            let marked = mark(&ctx, &rows).await;
            let mut lookups = JoinSet::new();
            for row in rows.into_iter().filter(|r| marked.contains(&r.intent_id())) {
                let route = ctx.routes.get(&row.action).cloned();
                let outcomes = self.outcomes.clone();
                let span = tracing::info_span!("reconcile", tenant = %row.tenant_id, intent_id = row.intent_id(), key = %row.idempotency_key);
                lookups.spawn(tracing::Instrument::instrument(
                    async move {
                        let decided = look_up(route.as_deref(), &row).await;
                        tracing::info!(outcome = ?decided.report.as_ref().map(|r| r.kind), status = %decided.status, "reconciled");
                        crate::services::dispatch::send(&outcomes, decided).await;
                    },
                    span,
                ));
            }
            while lookups.join_next().await.is_some() {}
        }
        ctx.metrics.loop_ended(LOOP_RECONCILE);
    }
}

/// Moves the claimed rows' intents to `reconciling` (fenced); the intents marked — only those
/// are looked up. A failure is logged and marks nothing: those rows wait for their lease.
async fn mark(ctx: &Context, rows: &[ClaimedRow]) -> HashSet<i64> {
    let leases: Vec<Lease> = rows.iter().map(|r| r.lease).collect();
    match oncebox_store::mark_reconciling(&ctx.pool, &ctx.settings.id, &leases).await {
        Ok(ids) => ids.into_iter().collect(),
        Err(e) => {
            tracing::warn!(error = %e, n = leases.len(), "marking rows reconciling failed; they wait for their lease to expire");
            HashSet::new()
        }
    }
}

/// Looks one effect up (when the destination has a lookup) and decides what it means.
async fn look_up(route: Option<&Route>, row: &ClaimedRow) -> Completion {
    let started = Instant::now();
    let window = route.map_or(Duration::ZERO, |r| r.consistency_window);
    let lookup = route.and_then(|r| r.lookup.as_ref());
    let reference = row.external_reference.as_deref();
    let key = row.delivery_key();
    let found = match lookup {
        Some(l) => Some((
            l,
            l.shown_url(&key, reference),
            l.lookup(&row.tenant_id, &key, reference).await,
        )),
        None => None,
    };
    let r = Reconciling {
        lease: row.lease,
        attempt: row.attempt,
        dispatched_at: row.dispatched_at.map(SystemTime::from),
        elapsed: started.elapsed(),
    };
    decide_reconcile(
        &r,
        found
            .as_ref()
            .map(|(l, url, result)| (l.settings(), url.as_str(), result)),
        row.delivery_arguments(),
        window,
        SystemTime::now(),
        &mut || fastrand::f64(),
    )
}
