//! The journal row, as read back from `oncebox.intents`.

use chrono::{DateTime, Utc};
use oncebox_core::Status;
use serde::Serialize;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{FromRow, PgConnection, Row};

/// One intent of the journal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Intent {
    /// Database id.
    pub id: i64,
    /// The owner.
    pub tenant_id: String,
    /// The stable key, unique per tenant.
    pub idempotency_key: String,
    /// The configured action.
    pub action: String,
    /// Hex SHA-256 of JCS(`{action, arguments}`) after redaction.
    pub request_hash: String,
    /// The arguments after redaction.
    pub payload: Value,
    /// Where the intent stands.
    pub status: Status,
    /// Transport attempts made so far.
    pub attempt_count: i32,
    /// The receiver's id for the effect, once known.
    pub external_reference: Option<String>,
    /// The receiver's answer (bounded), once succeeded.
    pub response: Option<Value>,
    /// The last error: `{code, detail, status_code}`.
    pub last_error: Option<Value>,
    /// The agent run.
    pub run_id: Option<String>,
    /// The caller's business reference.
    pub business_ref: Option<String>,
    /// The step within the run.
    pub step: Option<String>,
    /// No attempt starts after this time.
    pub deadline: Option<DateTime<Utc>>,
    /// When the intent was accepted.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it reached a terminal status.
    pub completed_at: Option<DateTime<Utc>>,
}

impl<'r> FromRow<'r, PgRow> for Intent {
    fn from_row(row: &'r PgRow) -> Result<Self, sqlx::Error> {
        let status: String = row.try_get("status")?;
        let status = status
            .parse::<Status>()
            .map_err(|e| sqlx::Error::ColumnDecode {
                index: "status".into(),
                source: Box::new(e),
            })?;
        Ok(Intent {
            id: row.try_get("id")?,
            tenant_id: row.try_get("tenant_id")?,
            idempotency_key: row.try_get("idempotency_key")?,
            action: row.try_get("action")?,
            request_hash: row.try_get("request_hash")?,
            payload: row.try_get::<Json<Value>, _>("payload")?.0,
            status,
            attempt_count: row.try_get("attempt_count")?,
            external_reference: row.try_get("external_reference")?,
            response: row
                .try_get::<Option<Json<Value>>, _>("response")?
                .map(|j| j.0),
            last_error: row
                .try_get::<Option<Json<Value>>, _>("last_error")?
                .map(|j| j.0),
            run_id: row.try_get("run_id")?,
            business_ref: row.try_get("business_ref")?,
            step: row.try_get("step")?,
            deadline: row.try_get("deadline")?,
            created_at: row.try_get("created_at")?,
            updated_at: row.try_get("updated_at")?,
            completed_at: row.try_get("completed_at")?,
        })
    }
}

/// Reads one intent by tenant and key; `None` when the tenant has no such key.
///
/// # Errors
/// The database's error.
#[tracing::instrument(skip(conn), err)]
pub async fn intent_by_key(
    conn: &mut PgConnection,
    tenant_id: &str,
    idempotency_key: &str,
) -> Result<Option<Intent>, sqlx::Error> {
    sqlx::query_as(include_str!("../queries/intent_by_key.sql"))
        .bind(tenant_id)
        .bind(idempotency_key)
        .fetch_optional(conn)
        .await
}
