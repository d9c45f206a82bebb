//! The claimer: the delivery loop. It claims batches of deliver rows (SKIP LOCKED, lease,
//! epoch + 1), starts their calls with bounded concurrency, and sleeps on LISTEN/NOTIFY with
//! polling as the fallback when there is nothing to do. On stop it claims nothing more, gives
//! the calls under way the grace period, and releases the rest so another worker takes them at
//! once.

use std::sync::Arc;
use std::time::Duration;

use oncebox_store::{ClaimSession, ClaimedRow, Phase, TenantCursor};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::metrics::{LOOP_DELIVER, now_ms};
use crate::service::Service;
use crate::services::completer::Outcomes;
use crate::services::wakeup::{Next, Wakeup, sleep_or_stop};

/// How long a claim waits for half a batch of free slots before claiming what is free.
const FILL_WAIT: Duration = Duration::from_millis(2);

/// The delivery loop.
pub(crate) struct Claimer {
    outcomes: Outcomes,
    wakeup: Wakeup,
    /// Its own connection (see `oncebox_store::ClaimSession`); made again after a failure.
    session: Option<ClaimSession>,
    /// Where its next claim starts among the tenants with work.
    cursor: TenantCursor,
}

impl Claimer {
    /// A claimer sending outcomes to `outcomes` and woken by `wakeup`.
    pub(crate) fn new(outcomes: Outcomes, wakeup: Wakeup) -> Claimer {
        Claimer {
            outcomes,
            wakeup,
            session: None,
            cursor: TenantCursor::default(),
        }
    }

    /// Claims up to `room` deliver rows on the claimer's own session, opening it first when
    /// there is none; after an error the session is dropped and the next claim opens another.
    async fn claim(&mut self, ctx: &Context, room: usize) -> Result<Vec<ClaimedRow>, sqlx::Error> {
        let settings = &ctx.settings;
        let session = match &mut self.session {
            Some(s) => s,
            None => self.session.insert(ClaimSession::open(&ctx.pool).await?),
        };
        let claimed = session
            .claim(
                Phase::Deliver,
                &settings.id,
                room as i64,
                settings.lease(),
                &mut self.cursor,
            )
            .await;
        if claimed.is_err() {
            self.session = None;
        }
        claimed
    }

    /// With nothing ready, plans the claim again if its plan is old (see
    /// `ClaimSession::replan_if_old`); after an error the session is dropped, as after a claim's.
    async fn replan_if_old(&mut self, ctx: &Context) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        let settings = &ctx.settings;
        let replanned = session
            .replan_if_old(Phase::Deliver, &settings.id, settings.lease())
            .await;
        if let Err(e) = replanned {
            tracing::warn!(error = %e, "planning the claim again failed; opening another session");
            self.session = None;
        }
    }
}

impl Service for Claimer {
    const NAME: &'static str = "claimer";

    async fn run(mut self, ctx: Arc<Context>, stop: CancellationToken) {
        let settings = &ctx.settings;
        let permits = Arc::new(Semaphore::new(settings.concurrency.get()));
        let mut calls = JoinSet::new();
        tracing::info!(worker = %settings.id, concurrency = settings.concurrency, "claiming deliveries");
        while !stop.is_cancelled() {
            crate::crash::panic_in(Self::NAME);
            ctx.metrics.heartbeat(LOOP_DELIVER, now_ms());
            while calls.try_join_next().is_some() {}
            let Some(room) = room(&ctx, &permits, &mut calls, &stop).await else {
                continue;
            };
            let claimed = self.claim(&ctx, room).await;
            let next = match claimed {
                Err(e) => {
                    tracing::warn!(error = %e, "claim failed; retrying after the poll interval");
                    sleep_or_stop(settings.poll_interval(), &stop).await
                }
                Ok(rows) if rows.is_empty() => {
                    self.replan_if_old(&ctx).await;
                    self.wakeup.idle(&ctx, &stop).await
                }
                Ok(rows) => {
                    crate::crash::point("after_claim").await;
                    self.wakeup.working(&ctx, rows.len()).await;
                    ctx.metrics.claimed(rows.len());
                    crate::services::dispatch::start(
                        &ctx,
                        rows,
                        &permits,
                        &self.outcomes,
                        &mut calls,
                    )
                    .await;
                    // Let the calls just spawned send their requests before the next claim:
                    // a spawned task otherwise waits on this thread until the claimer yields.
                    tokio::task::yield_now().await;
                    Next::Claim
                }
            };
            if next == Next::Stop {
                break;
            }
        }
        ctx.metrics.loop_ended(LOOP_DELIVER);
        finish(&ctx, calls).await;
        self.wakeup.stop(&ctx).await;
    }
}

/// How many rows to claim now; `None` after waiting for room. Claims come in worthwhile
/// batches: with calls under way, it waits until half a batch of slots is free (or a few
/// milliseconds have passed), so a steady drain does not become a stream of one-row claims,
/// each its own commit.
async fn room(
    ctx: &Context,
    permits: &Semaphore,
    calls: &mut JoinSet<()>,
    stop: &CancellationToken,
) -> Option<usize> {
    let settings = &ctx.settings;
    let batch = settings.batch.get();
    let want = batch.min(settings.concurrency.get()).div_ceil(2);
    let free = permits.available_permits().min(batch);
    if free == 0 || (free < want && !calls.is_empty()) {
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = calls.join_next() => {}
            _ = tokio::time::sleep(FILL_WAIT), if free > 0 => {}
        }
        return None;
    }
    Some(free)
}

/// Shutdown: the calls under way get the grace period; the rest are abandoned and their leases
/// released (made to expire now, not left to run out), keeping the holder and `dispatched_at`: a
/// released call may have been sent, its outcome is unknown, and it must not look cancellable.
async fn finish(ctx: &Context, mut calls: JoinSet<()>) {
    let settings = &ctx.settings;
    tracing::info!(worker = %settings.id, in_flight = calls.len(), "stopping: finishing calls under way");
    let deadline = tokio::time::sleep(settings.grace);
    tokio::pin!(deadline);
    while !calls.is_empty() {
        tokio::select! {
            _ = &mut deadline => break,
            _ = calls.join_next() => {}
        }
    }
    let unfinished = ctx.in_flight.abandon_all();
    calls.abort_all();
    if unfinished.is_empty() {
        return;
    }
    match oncebox_store::release(&ctx.pool, &settings.id, Phase::Deliver, &unfinished).await {
        Ok(released) => tracing::info!(released = released.len(), "released unfinished deliveries"),
        Err(e) => tracing::warn!(error = %e, "could not release leases; they expire by themselves"),
    }
}
