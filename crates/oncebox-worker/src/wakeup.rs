//! When the claimer looks for work again: at once while work keeps coming (tight polling, no
//! NOTIFY needed), and otherwise on LISTEN/NOTIFY with polling as the fallback. The protocol is
//! `oncebox_store`'s (see its `wake` module): LISTEN, register as waiting, claim once more, then
//! wait — and after a lost LISTEN connection, the same again, since notifications sent while it
//! was down are gone.

use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use crate::context::Context;

/// How often a waiting worker refreshes its registration: well within the minute after which
/// submits stop counting it (and independent of the poll interval, which may be longer).
const REFRESH: Duration = Duration::from_secs(15);

/// The claimer's wake-up state.
pub(crate) struct Wakeup {
    listener: Option<PgListener>,
    registered: bool,
    last_work: Instant,
}

/// What the claimer does after [`Wakeup::idle`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Claim again.
    Claim,
    /// The worker is stopping.
    Stop,
}

impl Wakeup {
    /// Opens the LISTEN connection.
    ///
    /// # Errors
    /// The database's error: a worker that cannot LISTEN at start-up does not start.
    pub(crate) async fn connect(pool: &PgPool) -> Result<Wakeup, sqlx::Error> {
        Ok(Wakeup {
            listener: Some(listen(pool).await?),
            registered: false,
            last_work: Instant::now(),
        })
    }

    /// A claim returned work: submits need not wake this worker for a while.
    pub(crate) async fn working(&mut self, ctx: &Context) {
        self.last_work = Instant::now();
        if self.registered {
            match oncebox_store::deregister_waiting(&ctx.pool, &ctx.settings.id).await {
                Ok(()) => self.registered = false,
                Err(e) => tracing::warn!(error = %e, "could not deregister as waiting"),
            }
        }
    }

    /// A claim found nothing: waits until it is worth claiming again.
    pub(crate) async fn idle(&mut self, ctx: &Context, stop: &CancellationToken) -> Next {
        let settings = &ctx.settings;
        if self.last_work.elapsed() < settings.idle_after {
            // Work arrived recently: poll tightly rather than make every submit NOTIFY
            // (notifying commits serialise cluster-wide). An empty claim writes nothing.
            return sleep_or_stop(settings.busy_poll.get(), stop).await;
        }
        if !self.registered {
            // LISTEN first, then register, then claim once more: a row committed before this
            // point is found by that claim, one committed after it notifies.
            if self.listener.is_none() {
                match listen(&ctx.pool).await {
                    Ok(l) => self.listener = Some(l),
                    Err(e) => tracing::warn!(error = %e, "LISTEN failed; polling until it is back"),
                }
            }
            if self.listener.is_some() {
                self.registered = register(ctx).await;
            }
            if !self.registered {
                return sleep_or_stop(settings.poll_interval(), stop).await;
            }
            return Next::Claim;
        }
        self.wait(ctx, stop).await
    }

    /// Waits for a notification or the poll interval, refreshing the registration meanwhile.
    async fn wait(&mut self, ctx: &Context, stop: &CancellationToken) -> Next {
        let Some(listener) = self.listener.as_mut() else {
            return sleep_or_stop(ctx.settings.poll_interval(), stop).await;
        };
        let poll = tokio::time::sleep(ctx.settings.poll_interval());
        tokio::pin!(poll);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Next::Stop,
                _ = &mut poll => return Next::Claim,
                _ = tokio::time::sleep(REFRESH) => {
                    register(ctx).await;
                }
                heard = listener.try_recv() => {
                    match heard {
                        Ok(Some(_)) => return Next::Claim,
                        Ok(None) => {
                            // The connection was lost and made anew: what was sent meanwhile
                            // is gone. Register and claim once more.
                            tracing::warn!("LISTEN connection lost and re-established");
                            self.registered = false;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "LISTEN connection failed; reconnecting");
                            self.listener = None;
                            self.registered = false;
                        }
                    }
                    return Next::Claim;
                }
            }
        }
    }

    /// The worker is stopping: submits need not wake it.
    pub(crate) async fn stop(&mut self, ctx: &Context) {
        if let Err(e) = oncebox_store::deregister_waiting(&ctx.pool, &ctx.settings.id).await {
            tracing::warn!(error = %e, "could not deregister as waiting; the mark expires in a minute");
        }
    }
}

async fn listen(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(oncebox_store::OUTBOX_CHANNEL).await?;
    Ok(listener)
}

/// Registers (or refreshes) this worker as waiting; false, logged, when it could not.
async fn register(ctx: &Context) -> bool {
    match oncebox_store::register_waiting(&ctx.pool, &ctx.settings.id).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(error = %e, "could not register as waiting; polling");
            false
        }
    }
}

/// Sleeps `d`, or less when the worker stops.
pub(crate) async fn sleep_or_stop(d: Duration, stop: &CancellationToken) -> Next {
    tokio::select! {
        _ = stop.cancelled() => Next::Stop,
        _ = tokio::time::sleep(d) => Next::Claim,
    }
}
