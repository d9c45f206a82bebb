//! Approvals (docs/approvals.md): people approve or reject an intent that awaits approval. Each
//! decision is a row of the audit log with the person's identity and reason; an approval is also
//! a row of `oncebox.approvals`, one per identity, so one person counts once. The identity that
//! submitted an intent may not approve it (four eyes). The last approval the intent needs makes
//! it `pending` and queues it; a rejection ends it `rejected`, never sent.

use chrono::{DateTime, Utc};
use oncebox_core::Status;
use sqlx::PgConnection;

use crate::intent::Intent;
use crate::ops::{Actor, OpsError, audit, lock};
use crate::sql;

/// What [`approve`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Approved {
    /// The intent as it now is: still `awaiting_approval`, or `pending` once released.
    pub intent: Intent,
    /// Approvals recorded so far, this one included.
    pub approvals: i64,
    /// Approvals the intent needs.
    pub needed: i64,
}

impl Approved {
    /// Whether this approval was the last one needed: the intent is on its way.
    pub fn released(&self) -> bool {
        self.intent.status == Status::Pending
    }
}

/// An intent awaiting approval, with where its approvals stand.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Awaiting {
    /// The intent.
    #[sqlx(flatten)]
    pub intent: Intent,
    /// Approvals recorded so far.
    pub approvals: i64,
    /// Approvals it needs.
    pub approvals_needed: Option<i16>,
    /// When its window closes: then it expires, unsent.
    pub approval_expires_at: Option<DateTime<Utc>>,
}

/// What an "approval requested" message states of an intent that still awaits approval.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct ApprovalRequest {
    /// The intent.
    pub id: i64,
    /// Approvals it needs.
    pub approvals_needed: Option<i16>,
    /// When its window closes.
    pub approval_expires_at: Option<DateTime<Utc>>,
}

/// The approval requests of the intents `ids` that still await approval (the others are
/// left out: decided, expired or gone).
///
/// # Errors
/// The database's error.
pub async fn approval_requests(
    db: impl sqlx::PgExecutor<'_>,
    ids: &[i64],
) -> Result<Vec<ApprovalRequest>, sqlx::Error> {
    sqlx::query_as(sql::APPROVAL_REQUESTS)
        .bind(ids)
        .fetch_all(db)
        .await
}

/// `tenant`'s intents awaiting approval, oldest first (at most `limit`, after the intent
/// created at `after.0` with id `after.1` when given), or the one with id `only`.
///
/// # Errors
/// The database's error.
pub async fn awaiting(
    db: impl sqlx::PgExecutor<'_>,
    tenant: &str,
    only: Option<i64>,
    after: Option<(DateTime<Utc>, i64)>,
    limit: i64,
) -> Result<Vec<Awaiting>, sqlx::Error> {
    sqlx::query_as(sql::CONSOLE_APPROVALS)
        .bind(tenant)
        .bind(limit)
        .bind(only)
        .bind(after.map(|a| a.0))
        .bind(after.map(|a| a.1))
        .fetch_all(db)
        .await
}

/// How many of a tenant's intents await approval, and when the first window closes.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Waiting {
    /// Intents awaiting approval.
    pub waiting: i64,
    /// When the first of their windows closes; `None` when none waits.
    pub first_expiry: Option<DateTime<Utc>>,
}

/// How many of `tenant`'s intents await approval, and when the first of their windows closes.
///
/// # Errors
/// The database's error.
pub async fn waiting(db: impl sqlx::PgExecutor<'_>, tenant: &str) -> Result<Waiting, sqlx::Error> {
    sqlx::query_as(sql::APPROVALS_SUMMARY)
        .bind(tenant)
        .fetch_one(db)
        .await
}

/// What ops_approval_check.sql reads of an intent awaiting approval.
#[derive(sqlx::FromRow)]
struct Check {
    holder: Option<String>,
    window_closed: Option<bool>,
    approval_expires_at: Option<DateTime<Utc>>,
    submitted_by: Option<String>,
    approvals_needed: Option<i16>,
    approvals: i64,
    approved_already: bool,
}

/// Locks intent `id` and reads what decides whether `actor` may approve or reject it: it must
/// await approval, within its window, with no worker expiring it.
async fn check(tx: &mut PgConnection, id: i64, actor: &Actor) -> Result<(Intent, Check), OpsError> {
    let i = lock(tx, id).await?;
    let key = &i.idempotency_key;
    if i.status != Status::AwaitingApproval {
        return Err(OpsError::Refused(format!(
            "intent {key} is {}: only an intent awaiting approval can be approved or rejected",
            i.status
        )));
    }
    let c: Check = sqlx::query_as(sql::OPS_APPROVAL_CHECK)
        .bind(id)
        .bind(&actor.who)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(d) if d.code().as_deref() == Some("55P03") => {
                OpsError::Refused(format!(
                    "a worker is taking intent {key} right now to expire it: its approval window closed"
                ))
            }
            _ => OpsError::Database(e),
        })?;
    if c.window_closed == Some(true) {
        let at = c
            .approval_expires_at
            .map_or_else(String::new, |t| format!(" at {}", t.to_rfc3339()));
        return Err(OpsError::Refused(format!(
            "intent {key}'s approval window closed{at}: it expires without being sent"
        )));
    }
    if let Some(worker) = c.holder {
        return Err(OpsError::Refused(format!(
            "worker {worker} holds intent {key} right now (it gives it back at once unless its approval window closed): try again"
        )));
    }
    Ok((i, c))
}

/// Records `actor`'s approval of intent `id`, with `why` (in the audit log, with the actor's
/// label). When it completes the approvals the intent needs, the intent
/// becomes `pending` and is queued — ready now, or parked behind its ordering lane's head. Run
/// it in a transaction: it locks the intent first.
///
/// # Errors
/// [`OpsError::Refused`] saying why: the intent does not await approval, its window closed,
/// `actor` submitted it (four eyes), or `actor` already approved it.
pub async fn approve(
    tx: &mut PgConnection,
    id: i64,
    actor: &Actor,
    why: Option<&str>,
) -> Result<Approved, OpsError> {
    let (i, c) = check(tx, id, actor).await?;
    let key = &i.idempotency_key;
    let needed = i64::from(c.approvals_needed.unwrap_or(1));
    if c.submitted_by.as_deref() == Some(actor.who.as_str()) {
        return Err(OpsError::Refused(format!(
            "{} submitted intent {key}: someone else must approve it",
            actor.who
        )));
    }
    if c.approved_already {
        return Err(OpsError::Refused(format!(
            "{} already approved intent {key}: one person counts once ({} of {needed} approvals so far; another person must approve it)",
            actor.who, c.approvals
        )));
    }
    let approvals: i64 = sqlx::query_scalar(sql::OPS_APPROVE)
        .bind(id)
        .bind(&actor.who)
        .bind(&actor.via)
        .bind(crate::DONE_CHANNEL)
        .bind(crate::OUTBOX_CHANNEL)
        .fetch_one(&mut *tx)
        .await?;
    let after = lock(tx, id).await?;
    audit(tx, &i, after.status, actor, "approve", why).await?;
    Ok(Approved {
        intent: after,
        approvals,
        needed,
    })
}

/// The arguments intent `id`, awaiting approval, will be delivered with — the originals, where
/// redaction keeps them from every other view — for `actor`, one of the people who decide on
/// it. The view is recorded in the audit log (action `view`) in the caller's transaction: run
/// it in one, and commit before showing what it returns.
///
/// # Errors
/// [`OpsError::Refused`] when the intent no longer awaits approval, or its originals are not
/// held.
pub async fn originals(
    tx: &mut PgConnection,
    id: i64,
    actor: &Actor,
) -> Result<serde_json::Value, OpsError> {
    let i = lock(tx, id).await?;
    let key = &i.idempotency_key;
    if i.status != Status::AwaitingApproval {
        return Err(OpsError::Refused(format!(
            "intent {key} is {}: its arguments are shown as they will execute only while it awaits approval",
            i.status
        )));
    }
    let held: Option<sqlx::types::Json<serde_json::Value>> =
        sqlx::query_scalar(sql::APPROVAL_ORIGINALS)
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
    let Some(sqlx::types::Json(arguments)) = held else {
        return Err(OpsError::Refused(format!(
            "the original arguments of intent {key} are not held"
        )));
    };
    let why = "viewed the arguments as they will execute";
    audit(tx, &i, i.status, actor, "view", Some(why)).await?;
    Ok(arguments)
}

/// Rejects intent `id`, awaiting approval, for `why`: it ends `rejected` (terminal) and is never
/// sent; its ordering lane, if any, moves on. Any person with the ops role may reject, the
/// submitter included. Run it in a transaction.
///
/// # Errors
/// [`OpsError::Refused`] when the intent does not await approval or its window closed.
pub async fn reject(
    tx: &mut PgConnection,
    id: i64,
    actor: &Actor,
    why: &str,
) -> Result<Intent, OpsError> {
    let (i, _) = check(tx, id, actor).await?;
    sqlx::query(sql::OPS_REJECT)
        .bind(id)
        .bind(crate::DONE_CHANNEL)
        .execute(&mut *tx)
        .await?;
    let after = lock(tx, id).await?;
    audit(tx, &i, after.status, actor, "reject", Some(why)).await?;
    Ok(after)
}
