//! When the claimer looks for work again. While the pool's work arrives slower than
//! [`WorkerSettings::notify_below`](crate::WorkerSettings::notify_below) per second the worker
//! stays registered as waiting and sleeps on LISTEN between claims, so each submit wakes it at
//! its commit; faster than that it deregisters (submits stop notifying: a notifying commit takes
//! a cluster-wide lock) and polls tightly, where every poll finds work anyway. The rate is the
//! pool's, not this worker's: while registered, every waiting worker hears every notifying
//! submit, so the notifications heard count them all; while polling, this worker's own claim
//! rate times the number of delivering workers estimates it. The protocol is
//! `oncebox_store`'s (see its `wake` module): LISTEN, register as waiting, claim once more, then
//! wait — and after a lost LISTEN connection, the same again, since notifications sent while it
//! was down are gone. Notifications already received are drained before each claim, never after
//! it: a drained notification's commit precedes the claim, which therefore sees its row.

use std::time::{Duration, Instant};

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

use crate::context::Context;

/// How often a waiting worker refreshes its registration: well within the minute after which
/// submits stop counting it (and independent of the poll interval, which may be longer).
const REFRESH: Duration = Duration::from_secs(15);

/// After this long without work a worker registers whatever its recent rate.
const IDLE_AFTER: Duration = Duration::from_secs(1);

/// The window over which the claim rate is measured.
const RATE_WINDOW: Duration = Duration::from_millis(250);

/// The claimer's wake-up state.
pub(crate) struct Wakeup {
    listener: Option<PgListener>,
    registered: bool,
    last_work: Instant,
    /// Rows this worker claimed.
    claimed: RateMeter,
    /// Notifications heard: the pool's notifying submits.
    heard: RateMeter,
}

/// Events (rows claimed, notifications heard) per second, over the last completed window of
/// [`RATE_WINDOW`].
#[derive(Debug)]
struct RateMeter {
    since: Instant,
    rows: usize,
    per_second: f64,
}

impl RateMeter {
    fn new() -> RateMeter {
        RateMeter {
            since: Instant::now(),
            rows: 0,
            per_second: 0.0,
        }
    }

    /// Counts `n` more events now.
    fn add(&mut self, n: usize) {
        self.rows += n;
    }

    /// The rate of the last completed window (a window with no claims at all counts as zero).
    fn rate(&mut self) -> f64 {
        let elapsed = self.since.elapsed();
        if elapsed >= RATE_WINDOW {
            self.per_second = self.rows as f64 / elapsed.as_secs_f64();
            self.rows = 0;
            self.since = Instant::now();
        }
        self.per_second
    }
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
            claimed: RateMeter::new(),
            heard: RateMeter::new(),
        })
    }

    /// The pool's rate of new work, as this worker can judge it.
    fn pool_rate(&mut self, ctx: &Context) -> f64 {
        let own = self.claimed.rate() * f64::from(ctx.delivering_workers());
        own.max(self.heard.rate())
    }

    /// A claim returned `rows` rows: at or above the notify rate, submits stop waking this
    /// worker (it polls instead).
    pub(crate) async fn working(&mut self, ctx: &Context, rows: usize) {
        self.last_work = Instant::now();
        self.claimed.add(rows);
        if self.registered && self.pool_rate(ctx) >= f64::from(ctx.settings.notify_below) {
            match oncebox_store::deregister_waiting(&ctx.pool, &ctx.settings.id).await {
                Ok(()) => self.registered = false,
                Err(e) => tracing::warn!(error = %e, "could not deregister as waiting"),
            }
        }
    }

    /// A claim found nothing: waits until it is worth claiming again.
    pub(crate) async fn idle(&mut self, ctx: &Context, stop: &CancellationToken) -> Next {
        let settings = &ctx.settings;
        let slow = self.pool_rate(ctx) < f64::from(settings.notify_below) / 2.0;
        if !self.registered && !slow && self.last_work.elapsed() < IDLE_AFTER {
            // Work keeps coming fast: poll tightly rather than make every submit NOTIFY
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
                        Ok(Some(_)) => {
                            let more = drain(listener).await;
                            self.heard.add(1 + more);
                            return Next::Claim;
                        }
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

/// Takes every notification already received, without waiting: one claim answers them all.
/// (Not `tokio::time::timeout(ZERO, …)`: a timer fires on the next millisecond tick, which cost
/// every wake-up about a millisecond.)
/// Returns how many it took.
async fn drain(listener: &mut PgListener) -> usize {
    let mut n = 0;
    loop {
        tokio::select! {
            biased;
            heard = listener.try_recv() => {
                if !matches!(heard, Ok(Some(_))) {
                    return n;
                }
                n += 1;
            }
            () = std::future::ready(()) => return n,
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
