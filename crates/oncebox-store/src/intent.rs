//! The journal row, as read back from `oncebox.intents`.

use chrono::{DateTime, Utc};
use oncebox_core::{AttemptError, CallIdentity, KeyForm, Status};
use serde::Serialize;
use serde_json::Value;
use sqlx::{FromRow, PgExecutor};

/// One intent of the journal. Every column is typed: a value this binary cannot read (a status
/// or error code written by a newer version) is a decode error, never a default.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct Intent {
    /// Database id.
    pub id: i64,
    /// The owner.
    pub tenant_id: String,
    /// The stable key, unique per tenant.
    pub idempotency_key: String,
    /// How its delivery key is formed (fixed when it was written): see
    /// [`Intent::delivery_key`].
    pub key_form: KeyForm,
    /// The configured action.
    pub action: String,
    /// Hex SHA-256 of JCS(`{action, arguments}`) after redaction.
    pub request_hash: String,
    /// The arguments after redaction.
    #[sqlx(json)]
    pub payload: Value,
    /// Where the intent stands.
    pub status: Status,
    /// Transport attempts made so far.
    pub attempt_count: i32,
    /// The receiver's id for the effect, once known.
    pub external_reference: Option<String>,
    /// The receiver's answer (bounded), once succeeded.
    #[sqlx(json(nullable))]
    pub response: Option<Value>,
    /// The last error: `{code, detail, status_code}`.
    #[sqlx(json(nullable))]
    pub last_error: Option<AttemptError>,
    /// The agent run.
    pub run_id: Option<String>,
    /// The caller's business reference.
    pub business_ref: Option<String>,
    /// The step within the run.
    pub step: Option<String>,
    /// The ordering key: intents of the same tenant, destination and key are delivered one at
    /// a time, in submit order.
    pub ordering_key: Option<String>,
    /// No attempt starts after this time.
    pub deadline: Option<DateTime<Utc>>,
    /// When the intent was accepted.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it reached a terminal status.
    pub completed_at: Option<DateTime<Utc>>,
    /// Who submitted it (`oncebox_core::Principal`'s text form): an API or MCP token's
    /// principal, the writer's configured one, or the database role (`db:ROLE`). `None` for
    /// intents written before submitters were recorded on every way in.
    pub submitted_by: Option<String>,
}

impl Intent {
    /// What every destination sees as the intent's identity: unique across tenants, the same
    /// for every attempt ([`oncebox_core::delivery_key`]).
    pub fn delivery_key(&self) -> String {
        self.key_form
            .delivery_key(&self.tenant_id, &self.idempotency_key)
    }
}

/// Reads one intent by tenant and key; `None` when the tenant has no such key.
///
/// # Errors
/// The database's error.
#[tracing::instrument(skip(db), err)]
pub async fn intent_by_key(
    db: impl PgExecutor<'_>,
    tenant_id: &str,
    idempotency_key: &str,
) -> Result<Option<Intent>, sqlx::Error> {
    sqlx::query_as(crate::sql::INTENT_BY_KEY)
        .bind(tenant_id)
        .bind(idempotency_key)
        .fetch_optional(db)
        .await
}

/// The key a tool call that names no key and no run takes at `at` ([`CallIdentity`]): the
/// previous dedupe window's, when `tenant` has an intent under it created less than a window
/// before `at`, else the current window's. One indexed read.
///
/// # Errors
/// The database's error.
pub async fn call_key(
    db: impl PgExecutor<'_>,
    tenant: &str,
    identity: &CallIdentity,
    at: std::time::SystemTime,
) -> Result<String, sqlx::Error> {
    let (current, previous) = identity.keys_at(at);
    if previous == current {
        return Ok(current);
    }
    let created = intent_by_key(db, tenant, &previous)
        .await?
        .map(|i| std::time::SystemTime::from(i.created_at));
    Ok(identity.key_for(at, created))
}
