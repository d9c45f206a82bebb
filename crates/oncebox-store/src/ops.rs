//! Operator actions (`oncebox ops`): list, history, retry, resolve, cancel, purge, stats.
//! Each change is one transaction that locks the intent, checks what it may do, and records
//! who did it and why as a row of the retry report.

use std::time::Duration;

use chrono::{DateTime, Utc};
use oncebox_core::Status;
use serde::Serialize;
use sqlx::{FromRow, PgConnection, Postgres, Transaction};

use crate::intent::Intent;

/// Which intents `list` returns.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this status.
    pub status: Option<Status>,
    /// Only this tenant.
    pub tenant_id: Option<String>,
    /// Only this action.
    pub action: Option<String>,
    /// Only intents not updated for this long.
    pub older_than: Option<Duration>,
    /// At most this many.
    pub limit: i64,
}

/// One row of the retry report.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct AttemptRow {
    /// Attempt number.
    pub attempt: i32,
    /// The lease epoch.
    pub epoch: i64,
    /// The worker or operator.
    pub worker: String,
    /// deliver, reconcile or ops.
    pub phase: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// What happened or was decided.
    pub outcome: Option<String>,
    /// HTTP status.
    pub status_code: Option<i32>,
    /// Error code.
    pub error_code: Option<String>,
    /// Detail.
    pub detail: Option<String>,
}

/// Why an operator action was refused.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// No such intent.
    #[error("{0}")]
    NotFound(String),
    /// The intent is not in a state that allows the action; nothing was changed.
    #[error("{0}")]
    Refused(String),
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// How an operator resolves an intent that needs review.
#[derive(Debug, Clone)]
pub enum Resolution {
    /// The effect happened (checked by a person), optionally with the receiver's reference.
    Succeeded {
        /// The receiver's id for the effect.
        reference: Option<String>,
    },
    /// The effect did not and will not happen.
    Failed {
        /// Why, in the operator's words.
        reason: String,
    },
}

/// Lists intents.
///
/// # Errors
/// The database's error.
pub async fn list(conn: &mut PgConnection, f: &ListFilter) -> Result<Vec<Intent>, sqlx::Error> {
    sqlx::query_as(include_str!("../queries/ops_list.sql"))
        .bind(f.status.map(Status::as_str))
        .bind(&f.tenant_id)
        .bind(&f.action)
        .bind(f.older_than.map(|d| d.as_secs_f64()))
        .bind(f.limit)
        .fetch_all(conn)
        .await
}

/// Finds an intent by database id or by key (with `tenant`, or alone when the key is unique
/// across tenants).
///
/// # Errors
/// [`OpsError::NotFound`], or [`OpsError::Refused`] when the key exists for several tenants.
pub async fn find(
    conn: &mut PgConnection,
    key_or_id: &str,
    tenant: Option<&str>,
) -> Result<Intent, OpsError> {
    let rows: Vec<Intent> = sqlx::query_as(
        "SELECT * FROM oncebox.intents
         WHERE (idempotency_key = $1 AND ($2::text IS NULL OR tenant_id = $2))
            OR ($2::text IS NULL AND $1 ~ '^[0-9]{1,18}$' AND id = $1::bigint)
         ORDER BY (idempotency_key = $1) DESC LIMIT 10",
    )
    .bind(key_or_id)
    .bind(tenant)
    .fetch_all(&mut *conn)
    .await?;
    let by_key: Vec<&Intent> = rows
        .iter()
        .filter(|i| i.idempotency_key == key_or_id)
        .collect();
    match (by_key.len(), rows.first()) {
        (1, _) => Ok(by_key[0].clone()),
        (0, Some(i)) => Ok(i.clone()),
        (0, None) => Err(OpsError::NotFound(format!(
            "no intent with key or id {key_or_id:?}"
        ))),
        (_, _) => Err(OpsError::Refused(format!(
            "key {key_or_id:?} exists for tenants {}: name one with --tenant",
            by_key
                .iter()
                .map(|i| i.tenant_id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The retry report of an intent.
///
/// # Errors
/// The database's error.
pub async fn history(
    conn: &mut PgConnection,
    intent_id: i64,
) -> Result<Vec<AttemptRow>, sqlx::Error> {
    sqlx::query_as(include_str!("../queries/ops_history.sql"))
        .bind(intent_id)
        .fetch_all(conn)
        .await
}

async fn lock(tx: &mut Transaction<'_, Postgres>, id: i64) -> Result<Intent, OpsError> {
    sqlx::query_as("SELECT * FROM oncebox.intents WHERE id = $1 FOR UPDATE")
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or_else(|| OpsError::NotFound(format!("intent {id} no longer exists")))
}

async fn report(
    tx: &mut Transaction<'_, Postgres>,
    i: &Intent,
    actor: &str,
    outcome: &str,
    detail: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_notify($1, '')")
        .bind(crate::DONE_CHANNEL)
        .execute(&mut **tx)
        .await?;
    sqlx::query(
        "INSERT INTO oncebox.attempts (intent_id, attempt, epoch, worker, phase, started_at, finished_at, outcome, detail)
         VALUES ($1, $2, 0, $3, 'ops', now(), now(), $4, $5)",
    )
    .bind(i.id)
    .bind(i.attempt_count)
    .bind(actor)
    .bind(outcome)
    .bind(detail)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Sends a `failed` or `needs_review` intent back to `pending`, with the same key: a fresh
/// deliver row is queued. `failed` → `pending` is an operator override of the automatic
/// transition table, recorded as such; `succeeded` and the other statuses are refused.
///
/// # Errors
/// [`OpsError::Refused`] naming the status; the database's error.
pub async fn retry(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    actor: &str,
    why: &str,
) -> Result<Intent, OpsError> {
    let i = lock(tx, id).await?;
    if !matches!(i.status, Status::Failed | Status::NeedsReview) {
        return Err(OpsError::Refused(format!(
            "intent {} is {}: only failed or needs_review intents can be retried{}",
            i.idempotency_key,
            i.status,
            if i.status == Status::Succeeded {
                " (it already succeeded; a retry could repeat its effect)"
            } else {
                ""
            }
        )));
    }
    sqlx::query(
        "UPDATE oncebox.intents SET status = 'pending', completed_at = NULL, updated_at = now() WHERE id = $1",
    )
    .bind(id)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "INSERT INTO oncebox.outbox (intent_id, phase) VALUES ($1, 'deliver')
         ON CONFLICT (intent_id, phase) DO UPDATE
         SET available_at = now(), lease_owner = NULL, lease_expires_at = NULL, dispatched_at = NULL",
    )
    .bind(id)
    .execute(&mut **tx)
    .await?;
    sqlx::query("DELETE FROM oncebox.outbox WHERE intent_id = $1 AND phase = 'reconcile'")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    report(
        tx,
        &i,
        actor,
        "operator_retry",
        &format!("{} -> pending by {actor}: {why}", i.status),
    )
    .await?;
    lock(tx, id).await
}

/// Decides an intent that needs review (or whose outcome is unknown): succeeded (with an
/// optional reference) or failed (with a reason). Its pending work is removed.
///
/// # Errors
/// [`OpsError::Refused`] unless the intent is `needs_review` or `unknown`.
pub async fn resolve(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    resolution: &Resolution,
    actor: &str,
) -> Result<Intent, OpsError> {
    let i = lock(tx, id).await?;
    if !matches!(i.status, Status::NeedsReview | Status::Unknown) {
        return Err(OpsError::Refused(format!(
            "intent {} is {}: only needs_review (or unknown) intents can be resolved",
            i.idempotency_key, i.status
        )));
    }
    let (status, reference, error, detail) = match resolution {
        Resolution::Succeeded { reference } => (
            Status::Succeeded,
            reference.clone(),
            None,
            format!(
                "resolved as succeeded by {actor}{}",
                reference
                    .as_ref()
                    .map_or(String::new(), |r| format!(" (reference {r})"))
            ),
        ),
        Resolution::Failed { reason } => (
            Status::Failed,
            None,
            Some(serde_json::json!({"code": "operator", "detail": reason})),
            format!("resolved as failed by {actor}: {reason}"),
        ),
    };
    sqlx::query(
        "UPDATE oncebox.intents
         SET status = $2, external_reference = coalesce($3, external_reference),
             last_error = coalesce($4, last_error), updated_at = now(), completed_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(reference)
    .bind(error.map(sqlx::types::Json))
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "DELETE FROM oncebox.outbox WHERE intent_id = $1 AND phase IN ('deliver', 'reconcile')",
    )
    .bind(id)
    .execute(&mut **tx)
    .await?;
    report(tx, &i, actor, "operator_resolved", &detail).await?;
    lock(tx, id).await
}

/// Cancels a pending intent that was never dispatched. Refused once any attempt was made, while
/// a worker holds its lease (it may be calling right now), or in any other status.
///
/// # Errors
/// [`OpsError::Refused`] saying why not.
pub async fn cancel(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    actor: &str,
) -> Result<Intent, OpsError> {
    let i = lock(tx, id).await?;
    if i.status != Status::Pending || i.attempt_count > 0 {
        return Err(OpsError::Refused(format!(
            "intent {} is {} after {} attempt(s): it may already have been dispatched, so it cannot be cancelled",
            i.idempotency_key, i.status, i.attempt_count
        )));
    }
    let leased: Option<(Option<String>, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT lease_owner, dispatched_at FROM oncebox.outbox
         WHERE intent_id = $1 AND phase = 'deliver' AND (lease_owner IS NULL OR lease_expires_at > now())
         FOR UPDATE NOWAIT",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(d) if d.code().as_deref() == Some("55P03") => {
            OpsError::Refused(format!("a worker is claiming intent {} right now; it cannot be cancelled", i.idempotency_key))
        }
        _ => OpsError::Database(e),
    })?;
    match leased {
        Some((Some(owner), _)) => {
            return Err(OpsError::Refused(format!(
                "worker {owner} holds intent {} and may be dispatching it: it cannot be cancelled",
                i.idempotency_key
            )));
        }
        Some((None, Some(_))) => {
            return Err(OpsError::Refused(format!(
                "intent {} was dispatched: it cannot be cancelled",
                i.idempotency_key
            )));
        }
        _ => {}
    }
    sqlx::query("UPDATE oncebox.intents SET status = 'cancelled', updated_at = now(), completed_at = now() WHERE id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM oncebox.outbox WHERE intent_id = $1 AND phase = 'deliver'")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    report(
        tx,
        &i,
        actor,
        "cancelled",
        &format!("cancelled by {actor} before dispatch"),
    )
    .await?;
    lock(tx, id).await
}

/// Removes terminal intents completed more than `older_than` ago, with their retry reports.
///
/// # Errors
/// The database's error.
pub async fn purge(conn: &mut PgConnection, older_than: Duration) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(include_str!("../queries/ops_purge.sql"))
        .bind(older_than.as_secs_f64())
        .fetch_one(conn)
        .await
}

/// Counts for `ops stats`.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// Intents per status.
    pub by_status: Vec<(String, i64)>,
    /// Outbox rows per phase.
    pub outbox: Vec<(String, i64)>,
    /// Age in seconds of the oldest ready deliver row.
    pub oldest_ready_seconds: f64,
}

/// Counts by status (a scan of the journal: an ops command, not a hot path) and the outbox.
///
/// # Errors
/// The database's error.
pub async fn stats(conn: &mut PgConnection) -> Result<Stats, sqlx::Error> {
    let by_status = sqlx::query_as(
        "SELECT status, count(*) FROM oncebox.intents GROUP BY status ORDER BY status",
    )
    .fetch_all(&mut *conn)
    .await?;
    let outbox =
        sqlx::query_as("SELECT phase, count(*) FROM oncebox.outbox GROUP BY phase ORDER BY phase")
            .fetch_all(&mut *conn)
            .await?;
    let oldest_ready_seconds: f64 = sqlx::query_scalar(
        "SELECT coalesce(extract(epoch FROM now() - min(available_at))::float8, 0) FROM oncebox.outbox
         WHERE phase = 'deliver' AND lease_owner IS NULL AND available_at <= now()",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(Stats {
        by_status,
        outbox,
        oldest_ready_seconds,
    })
}
