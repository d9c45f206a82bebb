//! Operator actions (`oncebox ops`): list, history, retry, resolve, cancel, purge, stats.
//! Each change is one transaction that locks the intent, checks what it may do, and records
//! who did it and why as a row of the retry report and a row of the audit log.

use std::time::Duration;

use chrono::{DateTime, Utc};
use oncebox_core::{AttemptError, AttemptKind, ErrorCode, Status};
use serde::Serialize;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, PgExecutor};

use crate::intent::Intent;
use crate::lease::Phase;
use crate::queue::ready_queue;
use crate::sql;

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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Attempt))]
pub struct AttemptRow {
    /// Attempt number.
    pub attempt: i32,
    /// The lease epoch.
    pub epoch: i64,
    /// The worker or operator.
    pub worker: String,
    /// The outbox phase that wrote the row; shown as `ops` for an operator's decision.
    #[serde(serialize_with = "phase_or_ops")]
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "deliver"))]
    pub phase: Option<Phase>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it ended.
    pub finished_at: Option<DateTime<Utc>>,
    /// What happened or was decided.
    pub outcome: Option<AttemptKind>,
    /// HTTP status.
    pub status_code: Option<i32>,
    /// Error code.
    pub error_code: Option<ErrorCode>,
    /// Detail.
    pub detail: Option<String>,
}

impl AttemptRow {
    /// The phase's name, or `ops` for an operator's row.
    pub fn phase_name(&self) -> &'static str {
        self.phase.map_or("ops", Phase::as_str)
    }
}

fn phase_or_ops<S: serde::Serializer>(phase: &Option<Phase>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(phase.map_or("ops", Phase::as_str))
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

/// Who makes an operator decision: named in the retry report (as `role:who`) and in the audit
/// log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// Who: `token <id>` for an API token, the OS user (or `--actor`) for the CLI.
    pub who: String,
    /// In what capacity: `ops`, or `agent` for an agent cancelling its own intent.
    pub role: String,
    /// Through what: `cli`, `api` or `mcp`.
    pub via: String,
    /// A name for people beside `who`: an API token's label.
    pub label: Option<String>,
}

impl Actor {
    /// An actor `who` in `role` through `via`.
    pub fn new(who: impl Into<String>, role: &str, via: &str) -> Actor {
        Actor {
            who: who.into(),
            role: role.to_owned(),
            via: via.to_owned(),
            label: None,
        }
    }

    /// This actor, named `label` for people (an API token's label; empty: none).
    pub fn with_label(mut self, label: Option<&str>) -> Actor {
        self.label = label.filter(|l| !l.trim().is_empty()).map(str::to_owned);
        self
    }

    /// `role:who`, as the retry report names it.
    pub fn label(&self) -> String {
        format!("{}:{}", self.role, self.who)
    }
}

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct AuditRow {
    /// Its id (the log's order).
    pub id: i64,
    /// When the decision was committed.
    pub at: DateTime<Utc>,
    /// Who.
    pub actor: String,
    /// In what role.
    pub role: String,
    /// Through what (`cli`, `api`, `console`, `mcp`).
    pub via: String,
    /// The actor's name for people: an API token's label.
    pub label: Option<String>,
    /// `retry`, `resolve`, `cancel`, `skip`, `approve` or `reject`.
    pub action: String,
    /// Why, in the operator's words.
    pub reason: Option<String>,
    /// The intent's status before.
    pub status_before: Status,
    /// And after.
    pub status_after: Status,
    /// The intent's tenant.
    pub tenant_id: String,
    /// The intent's key.
    pub idempotency_key: String,
}

/// The newest `limit` audit rows, of `tenant` and `key` when given, newest first.
///
/// # Errors
/// The database's error.
pub async fn audit_log(
    db: impl PgExecutor<'_>,
    tenant: Option<&str>,
    key: Option<&str>,
    limit: i64,
) -> Result<Vec<AuditRow>, sqlx::Error> {
    sqlx::query_as(sql::AUDIT_LIST)
        .bind(tenant)
        .bind(key)
        .bind(limit)
        .fetch_all(db)
        .await
}

/// Lists intents.
///
/// # Errors
/// The database's error.
pub async fn list(db: impl PgExecutor<'_>, f: &ListFilter) -> Result<Vec<Intent>, sqlx::Error> {
    sqlx::query_as(sql::OPS_LIST)
        .bind(f.status)
        .bind(&f.tenant_id)
        .bind(&f.action)
        .bind(f.older_than.map(|d| d.as_secs_f64()))
        .bind(f.limit)
        .fetch_all(db)
        .await
}

/// Finds an intent by database id or by key (with `tenant`, or alone when the key is unique
/// across tenants).
///
/// # Errors
/// [`OpsError::NotFound`], or [`OpsError::Refused`] when the key exists for several tenants.
pub async fn find(
    db: impl PgExecutor<'_>,
    key_or_id: &str,
    tenant: Option<&str>,
) -> Result<Intent, OpsError> {
    let rows: Vec<Intent> = sqlx::query_as(sql::OPS_FIND)
        .bind(key_or_id)
        .bind(tenant)
        .fetch_all(db)
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
    db: impl PgExecutor<'_>,
    intent_id: i64,
) -> Result<Vec<AttemptRow>, sqlx::Error> {
    sqlx::query_as(sql::OPS_HISTORY)
        .bind(intent_id)
        .fetch_all(db)
        .await
}

pub(crate) async fn lock(tx: &mut PgConnection, id: i64) -> Result<Intent, OpsError> {
    sqlx::query_as(sql::OPS_LOCK)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| OpsError::NotFound(format!("intent {id} no longer exists")))
}

/// Locks intent `id` and checks that an operator may make it `to`: the one table,
/// [`oncebox_core::status::OPERATOR_TRANSITIONS`], decides; a refusal says why.
async fn lock_for(tx: &mut PgConnection, id: i64, to: Status) -> Result<Intent, OpsError> {
    let i = lock(tx, id).await?;
    if i.status.operator_transition(to).is_ok() {
        return Ok(i);
    }
    let key = &i.idempotency_key;
    let why = match i.status {
        from if from == to => {
            return Err(OpsError::Refused(format!("intent {key} is already {to}")));
        }
        Status::Succeeded => "it succeeded, and a retry could repeat its effect",
        Status::InFlight | Status::Unknown | Status::Reconciling => {
            "a worker is still delivering, re-sending or looking it up; it will end succeeded, \
             failed or needs_review"
        }
        Status::Pending => "it is waiting for a worker",
        Status::AwaitingApproval => {
            "it awaits approval: approve it or reject it (`oncebox ops approve`, `oncebox ops reject`)"
        }
        _ => "it is final",
    };
    let may: Vec<&str> = i
        .status
        .operator_next()
        .iter()
        .map(|s| s.as_str())
        .collect();
    Err(OpsError::Refused(format!(
        "intent {key} is {}: an operator cannot make it {to} ({why}){}",
        i.status,
        if may.is_empty() {
            String::new()
        } else {
            format!(
                "; from {} an operator may make it {}",
                i.status,
                may.join(" or ")
            )
        }
    )))
}

/// An operator's decision as the retry report and the audit log keep it.
struct Decided<'a> {
    /// Who decided.
    actor: &'a Actor,
    /// The retry report's kind of row.
    kind: AttemptKind,
    /// The retry report's detail.
    detail: &'a str,
    /// The audit log's action (`retry`, `resolve`, `cancel`).
    action: &'a str,
    /// The reason the operator gave.
    reason: Option<&'a str>,
}

/// Records decision `d` on `before`: a row of the retry report and one of the audit log, in the
/// caller's transaction; returns the intent as it now is.
async fn report(
    tx: &mut PgConnection,
    before: &Intent,
    d: &Decided<'_>,
) -> Result<Intent, OpsError> {
    sqlx::query(sql::OPS_REPORT)
        .bind(before.id)
        .bind(before.attempt_count)
        .bind(d.actor.label())
        .bind(d.kind)
        .bind(d.detail)
        .bind(crate::DONE_CHANNEL)
        .execute(&mut *tx)
        .await?;
    let after = lock(tx, before.id).await?;
    audit(tx, before, after.status, d.actor, d.action, d.reason).await?;
    Ok(after)
}

/// One row of the audit log for `actor`'s decision `action` on `before`, which left it `after`.
pub(crate) async fn audit(
    tx: &mut PgConnection,
    before: &Intent,
    after: Status,
    actor: &Actor,
    action: &str,
    reason: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(sql::AUDIT_INSERT)
        .bind(before.id)
        .bind(&actor.who)
        .bind(&actor.role)
        .bind(&actor.via)
        .bind(&actor.label)
        .bind(action)
        .bind(reason.filter(|r| !r.trim().is_empty()))
        .bind(before.status)
        .bind(after)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Runs `statement`, whose one parameter is the intent's id, records decision `d` in the retry
/// report and the audit log, and returns the intent as it now is.
async fn apply(
    tx: &mut PgConnection,
    i: &Intent,
    statement: &'static str,
    d: &Decided<'_>,
) -> Result<Intent, OpsError> {
    sqlx::query(statement).bind(i.id).execute(&mut *tx).await?;
    report(tx, i, d).await
}

/// Sends a `failed` or `needs_review` intent back to `pending`, with the same key: its deliver
/// row is queued afresh. `failed` → `pending` is an operator override of the automatic
/// transition table, recorded as such. The next attempt carries the next attempt number (they
/// only grow) and the retry policy's budget starts again. A redacted intent is re-sent with its
/// original arguments — exactly what its first attempt sent — or refused when they are no longer
/// held. Run it in a transaction (`&mut tx`): it locks the intent first.
///
/// # Errors
/// [`OpsError::Refused`] saying why; the database's error.
pub async fn retry(
    tx: &mut PgConnection,
    id: i64,
    actor: &Actor,
    why: &str,
) -> Result<Intent, OpsError> {
    let i = lock_for(tx, id, Status::Pending).await?;
    let (redacted, originals_held): (Option<bool>, bool) = sqlx::query_as(sql::OPS_RETRY_CHECK)
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
    if redacted != Some(false) && !originals_held {
        let key = &i.idempotency_key;
        return Err(OpsError::Refused(match redacted {
            Some(_) => format!(
                "intent {key} was submitted with redacted arguments and the original request is \
                 no longer held: a retry would send a different body under the same key; submit \
                 a new intent with a new key instead"
            ),
            None => format!(
                "intent {key} was recorded before oncebox kept the originals of redacted \
                 requests, so what its first attempt sent is not known: a retry could send a \
                 different body under the same key; submit a new intent with a new key instead"
            ),
        }));
    }
    let detail = format!("{} -> pending by {}: {why}", i.status, actor.label());
    let decided = Decided {
        actor,
        kind: AttemptKind::OperatorRetry,
        detail: &detail,
        action: "retry",
        reason: Some(why),
    };
    apply(tx, &i, sql::OPS_RETRY, &decided).await
}

/// Decides an intent that needs review: succeeded (with an optional reference) or failed (with
/// a reason). Its pending work is removed. Run it in a transaction.
///
/// # Errors
/// [`OpsError::Refused`] unless the operator table allows it (only from `needs_review`).
pub async fn resolve(
    tx: &mut PgConnection,
    id: i64,
    resolution: &Resolution,
    actor: &Actor,
    why: Option<&str>,
) -> Result<Intent, OpsError> {
    let by = actor.label();
    let (status, reference, error, detail) = match resolution {
        Resolution::Succeeded { reference } => (
            Status::Succeeded,
            reference.clone(),
            None,
            format!(
                "resolved as succeeded by {by}{}",
                reference
                    .as_ref()
                    .map_or(String::new(), |r| format!(" (reference {r})"))
            ),
        ),
        Resolution::Failed { reason } => (
            Status::Failed,
            None,
            Some(AttemptError::new(ErrorCode::Operator, reason.clone())),
            format!("resolved as failed by {by}: {reason}"),
        ),
    };
    let i = lock_for(tx, id, status).await?;
    sqlx::query(sql::OPS_RESOLVE)
        .bind(id)
        .bind(status)
        .bind(reference)
        .bind(error.map(Json))
        .execute(&mut *tx)
        .await?;
    let reason = why.or(match resolution {
        Resolution::Failed { reason } => Some(reason.as_str()),
        Resolution::Succeeded { .. } => None,
    });
    let decided = Decided {
        actor,
        kind: AttemptKind::OperatorResolved,
        detail: &detail,
        action: "resolve",
        reason,
    };
    report(tx, &i, &decided).await
}

/// Cancels a pending intent that was never dispatched. Refused once any attempt was made, while
/// a worker holds its lease (it may be calling right now), or in any other status. Run it in a
/// transaction.
///
/// # Errors
/// [`OpsError::Refused`] saying why not.
pub async fn cancel(
    tx: &mut PgConnection,
    id: i64,
    actor: &Actor,
    why: Option<&str>,
) -> Result<Intent, OpsError> {
    let i = lock_for(tx, id, Status::Cancelled).await?;
    if i.attempt_count > 0 {
        return Err(OpsError::Refused(format!(
            "intent {} is pending after {} attempt(s): it may already have been dispatched, so it cannot be cancelled",
            i.idempotency_key, i.attempt_count
        )));
    }
    let leased: Option<(Option<String>, Option<DateTime<Utc>>)> =
        sqlx::query_as(sql::OPS_CANCEL_CHECK)
            .bind(id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| match &e {
                sqlx::Error::Database(d) if d.code().as_deref() == Some("55P03") => {
                    OpsError::Refused(format!(
                        "a worker is claiming intent {} right now; it cannot be cancelled",
                        i.idempotency_key
                    ))
                }
                _ => OpsError::Database(e),
            })?;
    match leased {
        Some((Some(owner), _)) => {
            return Err(OpsError::Refused(format!(
                "worker {owner} holds intent {} or held it until it stopped, and may have dispatched it: it cannot be cancelled (another worker takes it over when the lease runs out)",
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
    let detail = format!("cancelled by {} before dispatch", actor.label());
    let decided = Decided {
        actor,
        kind: AttemptKind::Cancelled,
        detail: &detail,
        action: "cancel",
        reason: why,
    };
    apply(tx, &i, sql::OPS_CANCEL, &decided).await
}

/// Skips intent `id`, the head of its ordering lane that ended failed, expired or needs_review
/// and blocks the lane: the lane goes on with its next intent. The intent itself is unchanged
/// (retry it later and it is delivered at once, outside its lane's order). Recorded in the audit
/// log as `skip`. Run it in a transaction.
///
/// # Errors
/// [`OpsError::Refused`] when the intent has no ordering key, is not blocking (its status), or is
/// not its lane's head; the database's error.
pub async fn skip(
    tx: &mut PgConnection,
    id: i64,
    actor: &Actor,
    why: &str,
) -> Result<Intent, OpsError> {
    let i = lock(tx, id).await?;
    let key = &i.idempotency_key;
    if i.ordering_key.is_none() {
        return Err(OpsError::Refused(format!(
            "intent {key} has no ordering key: it is in no lane"
        )));
    }
    if !i.status.is_dead_letter() {
        return Err(OpsError::Refused(format!(
            "intent {key} is {}: only a head that ended failed, expired or needs_review blocks \
             its lane",
            i.status
        )));
    }
    let head: Option<i64> = sqlx::query_scalar(sql::LANE_SKIP)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?
        .flatten();
    if head.is_none() {
        return Err(OpsError::Refused(format!(
            "intent {key} is not its lane's head: the lane has already moved past it"
        )));
    }
    audit(tx, &i, i.status, actor, "skip", Some(why)).await?;
    Ok(i)
}

/// After restoring a backup, before any worker starts: marks every queued delivery as possibly
/// sent (dispatched), since it may have been delivered after the backup was taken. Workers then
/// look each up, re-send it with its key, or hand it to a person, per its destination's
/// idempotency mode — never send it blind. Returns how many were marked.
///
/// # Errors
/// The database's error.
pub async fn mark_restored(db: impl PgExecutor<'_>) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(sql::OPS_RESTORED)
        .execute(db)
        .await?
        .rows_affected())
}

/// Terminal intents one purge statement removes at most: its own transaction, a second or so.
pub const PURGE_BATCH: i64 = 10_000;

/// Removes terminal intents completed more than `older_than` ago, with their retry reports, in
/// batches of [`PURGE_BATCH`] (each its own transaction, oldest first) until none is left: a
/// journal of any size is purged without a statement that outlasts the statement timeout or
/// a snapshot that holds vacuum back. Returns how many were removed; on an error, those
/// removed before it stay removed.
///
/// # Errors
/// The database's error.
pub async fn purge(pool: &sqlx::PgPool, older_than: Duration) -> Result<i64, sqlx::Error> {
    let (mut removed, mut from) = (0, None::<DateTime<Utc>>);
    loop {
        let (n, newest): (i64, Option<DateTime<Utc>>) = sqlx::query_as(sql::OPS_PURGE)
            .bind(older_than.as_secs_f64())
            .bind(PURGE_BATCH)
            .bind(from)
            .fetch_one(pool)
            .await?;
        removed += n;
        if n < PURGE_BATCH {
            return Ok(removed);
        }
        from = newest;
    }
}

/// Counts for `ops stats`.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// Intents per status.
    pub by_status: Vec<(Status, i64)>,
    /// Outbox rows per phase.
    pub outbox: Vec<(Phase, i64)>,
    /// Age in seconds of the oldest ready deliver row.
    pub oldest_ready_seconds: f64,
}

/// Counts by status (a scan of the journal: an ops command, not a hot path) and the outbox.
///
/// # Errors
/// The database's error.
pub async fn stats(conn: &mut PgConnection) -> Result<Stats, sqlx::Error> {
    let by_status = sqlx::query_as(sql::OPS_STATS_STATUS)
        .fetch_all(&mut *conn)
        .await?;
    let outbox = sqlx::query_as(sql::OPS_STATS_OUTBOX)
        .fetch_all(&mut *conn)
        .await?;
    let queue = ready_queue(&mut *conn).await?;
    Ok(Stats {
        by_status,
        outbox,
        oldest_ready_seconds: queue.oldest_seconds,
    })
}
