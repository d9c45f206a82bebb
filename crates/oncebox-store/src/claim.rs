//! Claiming outbox work: one statement leases a batch (SKIP LOCKED), bumps each row's fencing
//! epoch and commits at once — no transaction is held while the work is done.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection};
use std::time::Duration;

/// The kind of work an outbox row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Deliver the intent to its destination.
    Deliver,
    /// Look an unknown outcome up at the destination.
    Reconcile,
    /// Publish a dead-letter notification.
    Notify,
}

impl Phase {
    /// The name stored in `outbox.phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Deliver => "deliver",
            Phase::Reconcile => "reconcile",
            Phase::Notify => "notify",
        }
    }
}

/// An outbox row leased to the caller, with what the worker needs of its intent.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ClaimedRow {
    /// The intent it works on; with the phase, the row's identity.
    pub intent_id: i64,
    /// Its phase name.
    pub phase: String,
    /// The fencing epoch of this lease: every write must be conditional on it.
    pub epoch: i64,
    /// Attempts already made.
    pub attempt: i32,
    /// Set when an earlier attempt may have reached the destination.
    pub dispatched_at: Option<DateTime<Utc>>,
    /// The unredacted arguments, when they differ from the journal's payload.
    pub arguments: Option<Json<Value>>,
    /// When this lease ends unless renewed.
    pub lease_expires_at: DateTime<Utc>,
    /// True when the row was taken from a worker whose lease expired.
    pub lease_taken_over: bool,
    /// The intent's tenant.
    pub tenant_id: String,
    /// The intent's key.
    pub idempotency_key: String,
    /// The intent's action.
    pub action: String,
    /// The intent's request hash.
    pub request_hash: String,
    /// The redacted arguments (deliver `arguments` instead when present).
    pub payload: Json<Value>,
    /// The intent's status at claim time.
    pub status: String,
    /// The receiver's reference, when one is known.
    pub external_reference: Option<String>,
    /// The intent's last error.
    pub last_error: Option<Json<Value>>,
    /// The intent's attempts so far.
    pub attempt_count: i32,
    /// When the intent was accepted.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// The intent's deadline.
    pub deadline: Option<DateTime<Utc>>,
    /// True when the deadline has passed (by the database's clock).
    pub deadline_passed: bool,
}

impl ClaimedRow {
    /// The arguments to deliver: the unredacted copy when redaction changed them.
    pub fn delivery_arguments(&self) -> &Value {
        self.arguments.as_ref().map_or(&self.payload.0, |a| &a.0)
    }
}

/// Leases up to `limit` rows of `phase` to `worker` for `lease`, in one auto-committed
/// statement. Rows are ready ones in `available_at` order, plus rows whose lease expired.
///
/// # Errors
/// The database's error.
#[tracing::instrument(skip(conn), fields(phase = phase.as_str()), err)]
pub async fn claim(
    conn: &mut PgConnection,
    phase: Phase,
    worker: &str,
    limit: i64,
    lease: Duration,
) -> Result<Vec<ClaimedRow>, sqlx::Error> {
    sqlx::query_as(include_str!("../queries/claim.sql"))
        .bind(phase.as_str())
        .bind(worker)
        .bind(limit)
        .bind(lease.as_secs_f64())
        .fetch_all(conn)
        .await
}
