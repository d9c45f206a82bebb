//! The worker's fenced writes after a claim: dispatch marks, outcomes, lease renewal and
//! release. Each is one statement over a batch; each writes only rows still leased to the
//! worker at the epoch it claimed, so a worker whose lease was taken over writes nothing.

use std::time::Duration;

use oncebox_core::{AttemptError, AttemptKind, ErrorCode, Status};
use serde_json::Value;
use sqlx::PgExecutor;
use sqlx::types::Json;

use crate::lease::{Lease, Phase, columns};

/// What happens to the outbox row after an outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// The work is finished: delete the row.
    Done,
    /// Try again after this delay (same key).
    Retry(Duration),
    /// Look the effect up (the row becomes a reconcile-phase row).
    Reconcile,
    /// Nothing happened at the destination after its consistency window: deliver again with
    /// the same key (the row returns to the deliver phase).
    Reissue,
}

impl Next {
    /// The instruction record.sql reads.
    fn as_str(self) -> &'static str {
        match self {
            Next::Done => "done",
            Next::Retry(_) => "retry",
            Next::Reconcile => "reconcile",
            Next::Reissue => "reissue",
        }
    }
}

/// One delivery's outcome, ready to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The row's intent and the epoch the worker claimed: the fence.
    pub lease: Lease,
    /// The phase of the leased row.
    pub phase: Phase,
    /// Attempts made so far, this one included.
    pub attempt: i32,
    /// The journal's new status.
    pub status: Status,
    /// The receiver's answer, on success.
    pub response: Option<Value>,
    /// The receiver's reference, on success.
    pub external_reference: Option<String>,
    /// The last error, if any (kept as it was when `None`).
    pub last_error: Option<AttemptError>,
    /// What becomes of the outbox row.
    pub next: Next,
    /// Whether to add a row to the retry report, and what it says.
    pub report: Option<Report>,
}

/// One row of the retry report (`oncebox.attempts`).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// What the row records: an outcome class or a decision.
    pub kind: AttemptKind,
    /// The HTTP status, if any.
    pub status_code: Option<u16>,
    /// The error code, if any.
    pub error_code: Option<ErrorCode>,
    /// What happened and why the next step was allowed.
    pub detail: Option<String>,
    /// How long the attempt took.
    pub elapsed: Duration,
}

/// Records a batch of completions in one statement (its own implicit transaction). Returns the
/// intents written; a completion missing from the answer belonged to a lease taken over and
/// changed nothing.
///
/// # Errors
/// The database's error; nothing of the batch is written then.
#[tracing::instrument(skip(db, batch), fields(n = batch.len()), err)]
pub async fn record(
    db: impl PgExecutor<'_>,
    worker: &str,
    batch: &[Completion],
) -> Result<Vec<i64>, sqlx::Error> {
    fn col<'a, T>(batch: &'a [Completion], f: impl Fn(&'a Completion) -> T) -> Vec<T> {
        batch.iter().map(f).collect()
    }
    fn report(c: &Completion) -> Option<&Report> {
        c.report.as_ref()
    }
    sqlx::query_scalar(crate::sql::RECORD)
        .bind(col(batch, |c| c.lease.intent_id))
        .bind(col(batch, |c| c.lease.epoch))
        .bind(col(batch, |c| c.attempt))
        .bind(col(batch, |c| c.status))
        .bind(col(batch, |c| c.response.as_ref().map(Json)))
        .bind(col(batch, |c| c.external_reference.as_deref()))
        .bind(col(batch, |c| c.last_error.as_ref().map(Json)))
        .bind(col(batch, |c| c.next.as_str()))
        .bind(col(batch, |c| match c.next {
            Next::Retry(d) => d.as_secs_f64(),
            _ => 0.0,
        }))
        .bind(col(batch, |c| report(c).map(|r| r.kind)))
        .bind(col(batch, |c| {
            report(c).and_then(|r| r.status_code).map(i32::from)
        }))
        .bind(col(batch, |c| report(c).and_then(|r| r.error_code)))
        .bind(col(batch, |c| report(c).and_then(|r| r.detail.as_deref())))
        .bind(col(batch, |c| {
            report(c).map_or(0.0, |r| r.elapsed.as_secs_f64())
        }))
        .bind(col(batch, |c| c.phase))
        .bind(col(batch, |c| c.report.is_some()))
        .bind(worker)
        .bind(crate::DONE_CHANNEL)
        .fetch_all(db)
        .await
}

/// Runs a fenced batch statement over `leases` with `worker` as the lease owner, then `extra`
/// parameters; returns the intents it touched.
macro_rules! fenced {
    ($sql:expr, $db:expr, $worker:expr, $leases:expr $(, $extra:expr)*) => {{
        let (ids, epochs) = columns($leases);
        sqlx::query_scalar($sql)
            .bind(ids)
            .bind(epochs)
            .bind($worker)
            $(.bind($extra))*
            .fetch_all($db)
            .await
    }};
}

/// Marks leased deliver rows as dispatched (the request may leave) and their intents
/// `in_flight`, fenced on `(intent_id, epoch)`. Returns the intents marked: only those may be
/// sent.
///
/// # Errors
/// The database's error; then nothing may be sent.
#[tracing::instrument(skip(db, leases), fields(n = leases.len()), err)]
pub async fn mark_dispatched(
    db: impl PgExecutor<'_>,
    worker: &str,
    leases: &[Lease],
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(crate::sql::MARK_DISPATCHED, db, worker, leases)
}

/// Deletes the `phase` rows (notify: dead letters; ask: approval requests) whose messages were
/// sent (fenced); returns those deleted.
///
/// # Errors
/// The database's error.
pub async fn messages_sent(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(crate::sql::MESSAGES_SENT, db, worker, leases, phase)
}

/// Reschedules the `phase` rows whose messages could not be sent (fenced), after `delay`.
///
/// # Errors
/// The database's error.
pub async fn messages_later(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
    delay: Duration,
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(
        crate::sql::MESSAGES_LATER,
        db,
        worker,
        leases,
        delay.as_secs_f64(),
        phase
    )
}

/// Moves claimed reconcile rows' intents from `unknown` to `reconciling`, fenced on
/// `(intent_id, epoch)`; returns the intents marked: only those may be looked up.
///
/// # Errors
/// The database's error.
pub async fn mark_reconciling(
    db: impl PgExecutor<'_>,
    worker: &str,
    leases: &[Lease],
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(crate::sql::MARK_RECONCILING, db, worker, leases)
}

/// Extends the leases of `phase` rows by `lease`; returns the ones still held.
///
/// # Errors
/// The database's error.
pub async fn renew(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
    lease: Duration,
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(
        crate::sql::RENEW,
        db,
        worker,
        leases,
        lease.as_secs_f64(),
        phase
    )
}

/// Gives leases back so another worker can take the rows at once; returns the rows released.
///
/// # Errors
/// The database's error.
pub async fn release(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(crate::sql::RELEASE, db, worker, leases, phase)
}

/// Defers leased rows without an attempt (fenced), each for its own delay (`delays[i]` for
/// `leases[i]`): gives the lease back and makes the row wait, for a destination whose breaker
/// is open, that is disabled, or that is over its rate. Returns the intents deferred.
///
/// # Errors
/// The database's error.
pub async fn defer(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
    delays: &[Duration],
) -> Result<Vec<i64>, sqlx::Error> {
    let delays: Vec<f64> = delays.iter().map(Duration::as_secs_f64).collect();
    fenced!(crate::sql::DEFER, db, worker, leases, phase, delays)
}
