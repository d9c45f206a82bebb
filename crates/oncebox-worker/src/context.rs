//! What a worker's services share: the database, the routes, the settings, the metrics and the
//! deliveries under way.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use oncebox_store::{ClaimedRow, Lease, Phase, TenantCursor};
use sqlx::PgPool;
use tokio::task::AbortHandle;

use crate::metrics::Metrics;
use crate::routes::Routes;
use crate::settings::WorkerSettings;

/// The one context every service of a worker takes.
pub(crate) struct Context {
    /// The worker's pool (at most a handful of connections; see docs/production.md, "Sizing").
    pub(crate) pool: PgPool,
    /// Action → destination.
    pub(crate) routes: Routes,
    /// How the worker runs.
    pub(crate) settings: WorkerSettings,
    /// Counters, gauges and heartbeats.
    pub(crate) metrics: Arc<Metrics>,
    /// Deliveries whose calls are under way.
    pub(crate) in_flight: InFlight,
    /// The pool's circuit breakers, as last read.
    pub(crate) breakers: crate::breaker::Breakers,
    /// Workers claiming deliveries, this one included, as the gauges last counted them.
    pub(crate) delivering_workers: AtomicU32,
}

impl Context {
    /// Workers claiming deliveries, this one included (at least 1).
    pub(crate) fn delivering_workers(&self) -> u32 {
        self.delivering_workers.load(Ordering::Relaxed).max(1)
    }

    /// Records the gauges' count of workers claiming deliveries.
    pub(crate) fn set_delivering_workers(&self, n: i64) {
        let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        self.delivering_workers.store(n, Ordering::Relaxed);
    }
}

/// A polling loop's claims of one phase (reconcile, notify, ask): up to `limit` rows at a time
/// under this worker's lease, going round the tenants with work. After a claim that found
/// nothing, it first asks whether the phase has any row a claim could take
/// (`oncebox_store::phase_waiting`) and claims only when it has: an idle loop then costs
/// Postgres a statement planned in about 0.05 ms per poll instead of the claim's 1–1.5 ms.
pub(crate) struct PhaseClaims {
    phase: Phase,
    limit: i64,
    cursor: TenantCursor,
    /// The last claim found nothing.
    idle: bool,
}

impl PhaseClaims {
    /// Claims of `phase`, `limit` rows at most each.
    pub(crate) fn new(phase: Phase, limit: i64) -> PhaseClaims {
        PhaseClaims {
            phase,
            limit,
            cursor: TenantCursor::default(),
            idle: false,
        }
    }

    /// The next claim's rows; none when the phase has none to take. A failure is logged and
    /// claims nothing (the caller polls again).
    pub(crate) async fn next(&mut self, ctx: &Context) -> Vec<ClaimedRow> {
        let phase = self.phase;
        if self.idle {
            match oncebox_store::phase_waiting(&ctx.pool, phase).await {
                Ok(true) => {}
                Ok(false) => return Vec::new(),
                Err(e) => {
                    tracing::warn!(error = %e, %phase, "asking for work failed; trying again after the poll interval");
                    return Vec::new();
                }
            }
        }
        let settings = &ctx.settings;
        let claimed = oncebox_store::claim(
            &ctx.pool,
            phase,
            &settings.id,
            self.limit,
            settings.lease(),
            &mut self.cursor,
        )
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(error = %e, %phase, "claim failed; trying again after the poll interval");
            Vec::new()
        });
        self.idle = claimed.is_empty();
        claimed
    }
}

/// Deliveries whose calls are under way, by intent: the lease each holds and the handle that
/// abandons the call when the lease is lost.
#[derive(Default)]
pub(crate) struct InFlight(Mutex<HashMap<i64, (Lease, AbortHandle)>>);

impl InFlight {
    fn map(&self) -> MutexGuard<'_, HashMap<i64, (Lease, AbortHandle)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the call `spawn` starts for `lease`. The map is held while it spawns, so a call
    /// that finishes at once cannot remove itself before it is inserted.
    pub(crate) fn start(&self, lease: Lease, spawn: impl FnOnce() -> AbortHandle) {
        let mut map = self.map();
        let handle = spawn();
        map.insert(lease.intent_id, (lease, handle));
    }

    /// The call for `intent_id` is over.
    pub(crate) fn finish(&self, intent_id: i64) {
        self.map().remove(&intent_id);
    }

    /// The leases of every call under way.
    pub(crate) fn leases(&self) -> Vec<Lease> {
        self.map().values().map(|(lease, _)| *lease).collect()
    }

    /// Abandons the calls among `held` whose leases were not `kept` and that are still under way
    /// with the same epoch (one that finished meanwhile is gone from the map, or holds a newer
    /// lease); returns how many.
    pub(crate) fn abandon_lost(&self, held: &[Lease], kept: &HashSet<i64>) -> usize {
        let mut map = self.map();
        let mut lost = 0;
        for lease in held.iter().filter(|l| !kept.contains(&l.intent_id)) {
            if map.get(&lease.intent_id).is_some_and(|(l, _)| l == lease)
                && let Some((_, handle)) = map.remove(&lease.intent_id)
            {
                handle.abort();
                lost += 1;
            }
        }
        lost
    }

    /// Abandons every call and returns their leases, to be released.
    pub(crate) fn abandon_all(&self) -> Vec<Lease> {
        self.map()
            .drain()
            .map(|(_, (lease, handle))| {
                handle.abort();
                lease
            })
            .collect()
    }
}
