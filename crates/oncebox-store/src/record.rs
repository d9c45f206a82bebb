//! The worker's fenced writes after a claim: dispatch marks, outcomes, lease renewal and
//! release. Each is one statement over a batch; each writes only rows still leased to the
//! worker at the epoch it claimed, so a worker whose lease was taken over writes nothing.

use std::time::Duration;

use oncebox_core::Status;
use serde_json::Value;
use sqlx::PgConnection;
use sqlx::types::Json;

use crate::claim::Phase;

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
    /// The intent.
    pub intent_id: i64,
    /// The phase of the leased row.
    pub phase: Phase,
    /// The epoch the worker claimed: the fence.
    pub epoch: i64,
    /// Attempts made so far, this one included.
    pub attempt: i32,
    /// The journal's new status.
    pub status: Status,
    /// The receiver's answer, on success.
    pub response: Option<Value>,
    /// The receiver's reference, on success.
    pub external_reference: Option<String>,
    /// `{code, detail, status_code}` of the last error, if any.
    pub last_error: Option<Value>,
    /// What becomes of the outbox row.
    pub next: Next,
    /// Whether to add a row to the retry report, and what it says.
    pub report: Option<Report>,
}

/// One row of the retry report (`oncebox.attempts`).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `succeeded`, `retry_before_execution`, `permanent`, `unknown`, or a decision such as
    /// `expired` or `previous_outcome_unknown`.
    pub outcome: String,
    /// The HTTP status, if any.
    pub status_code: Option<u16>,
    /// The error code, if any.
    pub error_code: Option<String>,
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
#[tracing::instrument(skip(conn, batch), fields(n = batch.len()), err)]
pub async fn record(
    conn: &mut PgConnection,
    worker: &str,
    batch: &[Completion],
) -> Result<Vec<i64>, sqlx::Error> {
    let col = |f: &dyn Fn(&Completion) -> i64| batch.iter().map(f).collect::<Vec<i64>>();
    let ids = col(&|c| c.intent_id);
    let epochs = col(&|c| c.epoch);
    let attempts: Vec<i32> = batch.iter().map(|c| c.attempt).collect();
    let statuses: Vec<&str> = batch.iter().map(|c| c.status.as_str()).collect();
    let responses: Vec<Option<Json<&Value>>> = batch
        .iter()
        .map(|c| c.response.as_ref().map(Json))
        .collect();
    let refs: Vec<Option<&str>> = batch
        .iter()
        .map(|c| c.external_reference.as_deref())
        .collect();
    let errors: Vec<Option<Json<&Value>>> = batch
        .iter()
        .map(|c| c.last_error.as_ref().map(Json))
        .collect();
    let nexts: Vec<&str> = batch.iter().map(|c| c.next.as_str()).collect();
    let delays: Vec<f64> = batch
        .iter()
        .map(|c| match c.next {
            Next::Retry(d) => d.as_secs_f64(),
            _ => 0.0,
        })
        .collect();
    let outcomes: Vec<Option<&str>> = batch
        .iter()
        .map(|c| c.report.as_ref().map(|r| r.outcome.as_str()))
        .collect();
    let codes: Vec<Option<i32>> = batch
        .iter()
        .map(|c| c.report.as_ref().and_then(|r| r.status_code).map(i32::from))
        .collect();
    let error_codes: Vec<Option<&str>> = batch
        .iter()
        .map(|c| c.report.as_ref().and_then(|r| r.error_code.as_deref()))
        .collect();
    let details: Vec<Option<&str>> = batch
        .iter()
        .map(|c| c.report.as_ref().and_then(|r| r.detail.as_deref()))
        .collect();
    let ages: Vec<f64> = batch
        .iter()
        .map(|c| c.report.as_ref().map_or(0.0, |r| r.elapsed.as_secs_f64()))
        .collect();
    let phases: Vec<&str> = batch.iter().map(|c| c.phase.as_str()).collect();
    let reported: Vec<bool> = batch.iter().map(|c| c.report.is_some()).collect();
    sqlx::query_scalar(include_str!("../queries/record.sql"))
        .bind(ids)
        .bind(epochs)
        .bind(attempts)
        .bind(statuses)
        .bind(responses)
        .bind(refs)
        .bind(errors)
        .bind(nexts)
        .bind(delays)
        .bind(outcomes)
        .bind(codes)
        .bind(error_codes)
        .bind(details)
        .bind(ages)
        .bind(phases)
        .bind(reported)
        .bind(worker)
        .fetch_all(conn)
        .await
}

/// Marks leased deliver rows as dispatched (the request may leave) and their intents
/// `in_flight`, fenced on `(intent_id, epoch)`. Returns the intents marked: only those may be
/// sent.
///
/// # Errors
/// The database's error; then nothing may be sent.
#[tracing::instrument(skip(conn, leases), fields(n = leases.len()), err)]
pub async fn mark_dispatched(
    conn: &mut PgConnection,
    worker: &str,
    leases: &[(i64, i64)],
) -> Result<Vec<i64>, sqlx::Error> {
    let (ids, epochs): (Vec<i64>, Vec<i64>) = leases.iter().copied().unzip();
    sqlx::query_scalar(include_str!("../queries/mark_dispatched.sql"))
        .bind(ids)
        .bind(epochs)
        .bind(worker)
        .fetch_all(conn)
        .await
}

/// Deletes notify rows whose dead letters were published (fenced); returns those deleted.
///
/// # Errors
/// The database's error.
pub async fn notify_done(
    conn: &mut PgConnection,
    worker: &str,
    leases: &[(i64, i64)],
) -> Result<Vec<i64>, sqlx::Error> {
    let (ids, epochs): (Vec<i64>, Vec<i64>) = leases.iter().copied().unzip();
    sqlx::query_scalar(include_str!("../queries/notify_done.sql"))
        .bind(ids)
        .bind(epochs)
        .bind(worker)
        .fetch_all(conn)
        .await
}

/// Reschedules notify rows that could not be published (fenced), after `delay`.
///
/// # Errors
/// The database's error.
pub async fn notify_later(
    conn: &mut PgConnection,
    worker: &str,
    leases: &[(i64, i64)],
    delay: Duration,
) -> Result<Vec<i64>, sqlx::Error> {
    let (ids, epochs): (Vec<i64>, Vec<i64>) = leases.iter().copied().unzip();
    sqlx::query_scalar(include_str!("../queries/notify_later.sql"))
        .bind(ids)
        .bind(epochs)
        .bind(worker)
        .bind(delay.as_secs_f64())
        .fetch_all(conn)
        .await
}

/// Moves claimed reconcile rows' intents from `unknown` to `reconciling`, fenced on
/// `(intent_id, epoch)`; returns the intents marked: only those may be looked up.
///
/// # Errors
/// The database's error.
pub async fn mark_reconciling(
    conn: &mut PgConnection,
    worker: &str,
    leases: &[(i64, i64)],
) -> Result<Vec<i64>, sqlx::Error> {
    let (ids, epochs): (Vec<i64>, Vec<i64>) = leases.iter().copied().unzip();
    sqlx::query_scalar(include_str!("../queries/mark_reconciling.sql"))
        .bind(ids)
        .bind(epochs)
        .bind(worker)
        .fetch_all(conn)
        .await
}

/// Extends the leases of `(intent_id, epoch)` rows by `lease`; returns the ones still held.
///
/// # Errors
/// The database's error.
pub async fn renew(
    conn: &mut PgConnection,
    worker: &str,
    phase: Phase,
    leases: &[(i64, i64)],
    lease: Duration,
) -> Result<Vec<i64>, sqlx::Error> {
    let (ids, epochs): (Vec<i64>, Vec<i64>) = leases.iter().copied().unzip();
    sqlx::query_scalar(include_str!("../queries/renew.sql"))
        .bind(ids)
        .bind(epochs)
        .bind(worker)
        .bind(lease.as_secs_f64())
        .bind(phase.as_str())
        .fetch_all(conn)
        .await
}

/// Gives leases back so another worker can take the rows at once; returns the rows released.
///
/// # Errors
/// The database's error.
pub async fn release(
    conn: &mut PgConnection,
    worker: &str,
    phase: Phase,
    leases: &[(i64, i64)],
) -> Result<Vec<i64>, sqlx::Error> {
    let (ids, epochs): (Vec<i64>, Vec<i64>) = leases.iter().copied().unzip();
    sqlx::query_scalar(include_str!("../queries/release.sql"))
        .bind(ids)
        .bind(epochs)
        .bind(worker)
        .bind(phase.as_str())
        .fetch_all(conn)
        .await
}
