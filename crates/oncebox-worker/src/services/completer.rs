//! The completer: records outcomes in batches. It waits for one completion, takes whatever else
//! is ready, and writes them in one fenced statement, retrying transient failures while the
//! leases last. One statement runs at a time, so that what arrives meanwhile goes in the next,
//! larger batch; another starts beside it only when the one in flight is slow ([`SLOW_WRITE`]),
//! up to [`WRITES_IN_FLIGHT`] (outcomes of different intents commute).

use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use oncebox_store::{Completion, RecordSession};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::service::Service;

/// Record statements in flight at most.
const WRITES_IN_FLIGHT: usize = 3;

/// How long the record statement in flight runs before another may start beside it. A record
/// takes 1–10 ms; one that runs longer waits on a row lock or is retrying, and should not hold
/// up the outcomes behind it. Below that, outcomes wait for the statement in flight: batches of
/// ~130 outcomes instead of ~40 when draining over AMQP, about a third less Postgres CPU per
/// delivery, and no loss of latency at 10–2,000 intents/s (`docs/capacity.md`).
const SLOW_WRITE: Duration = Duration::from_millis(25);

/// Where the claimer and the reconciler send their outcomes.
pub(crate) type Outcomes = mpsc::Sender<Completion>;

/// The completer and the channel it drains.
pub(crate) struct Completer {
    rx: mpsc::Receiver<Completion>,
}

impl Completer {
    /// A completer and the sender its producers share; it holds `capacity` outcomes.
    pub(crate) fn new(capacity: usize) -> (Completer, Outcomes) {
        let (tx, rx) = mpsc::channel(capacity);
        (Completer { rx }, tx)
    }
}

impl Service for Completer {
    const NAME: &'static str = "completer";

    /// Records until every producer is gone (its stop comes only after they ended), then waits
    /// for its last writes.
    async fn run(mut self, ctx: Arc<Context>, stop: CancellationToken) {
        let mut writes = JoinSet::new();
        let sessions = Sessions::default();
        let mut youngest = Instant::now();
        loop {
            crate::crash::panic_in(Self::NAME);
            room_for_a_write(&mut writes, youngest).await;
            let first = tokio::select! {
                c = self.rx.recv() => c,
                _ = stop.cancelled() => self.rx.try_recv().ok(),
            };
            let Some(first) = first else { break };
            let mut batch = Vec::with_capacity(ctx.settings.record_batch.get());
            batch.push(first);
            while batch.len() < ctx.settings.record_batch.get() {
                match self.rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            youngest = Instant::now();
            writes.spawn(write(ctx.clone(), sessions.clone(), batch));
        }
        while writes.join_next().await.is_some() {}
    }
}

/// Returns when another record may start: none is in flight, or fewer than
/// [`WRITES_IN_FLIGHT`] are and the youngest (started at `youngest`) has run [`SLOW_WRITE`].
async fn room_for_a_write(writes: &mut JoinSet<()>, youngest: Instant) {
    while !writes.is_empty() {
        if writes.len() < WRITES_IN_FLIGHT {
            let Some(left) = SLOW_WRITE.checked_sub(youngest.elapsed()) else {
                return;
            };
            if tokio::time::timeout(left, writes.join_next())
                .await
                .is_err()
            {
                return;
            }
        } else {
            writes.join_next().await;
        }
    }
}

/// The completer's record sessions not in use: one per record in flight at most, opened when
/// first needed and kept while they work.
#[derive(Debug, Clone, Default)]
struct Sessions(Arc<std::sync::Mutex<Vec<RecordSession>>>);

impl Sessions {
    /// Records `batch` once: a batch of plain successes on a record session (one taken from
    /// those not in use, or opened), put back after a statement that worked; any other on the
    /// pool.
    async fn record(&self, ctx: &Context, batch: &[Completion]) -> Result<Vec<i64>, sqlx::Error> {
        let worker = &ctx.settings.id;
        if !RecordSession::takes(batch) {
            return oncebox_store::record(&ctx.pool, worker, batch).await;
        }
        let idle = self.0.lock().expect("sessions").pop();
        let mut session = match idle {
            Some(s) => s,
            None => RecordSession::open(&ctx.pool).await?,
        };
        let written = session.record(worker, batch).await?;
        self.0.lock().expect("sessions").push(session);
        Ok(written)
    }
}

/// Writes one batch, retrying while the leases last; logs what could not be written.
async fn write(ctx: Arc<Context>, sessions: Sessions, batch: Vec<Completion>) {
    let settings = &ctx.settings;
    let attempt = || sessions.record(&ctx, &batch);
    let written = attempt
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(50))
                .with_total_delay(Some(settings.lease())),
        )
        .notify(|e, d| tracing::warn!(error = %e, retry_in = ?d, "recording outcomes failed"))
        .await;
    match written {
        Ok(ids) if ids.len() < batch.len() => {
            tracing::warn!(
                lost = batch.len() - ids.len(),
                "outcomes not recorded: their leases were taken over"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::error!(
            error = %e,
            n = batch.len(),
            "gave up recording outcomes; their leases will expire and be taken over"
        ),
    }
}
