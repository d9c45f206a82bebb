//! What the API shows of an intent, and how a request finds its caller's intent: a leaf that the
//! agent's endpoints (`intents`) and the operator's (`ops`) both use, so neither needs the
//! other.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use oncebox_core::{AttemptError, Status};
use oncebox_store::ops::OpsError;
use oncebox_store::{Intent, intent_by_key};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;

use crate::AppState;
use crate::problem::Problem;

/// The public view of an intent: what its owner may read (no internal ids of other systems
/// beyond the receiver's reference).
#[derive(Debug, Serialize)]
pub(crate) struct IntentView<'a> {
    idempotency_key: &'a str,
    action: &'a str,
    status: Status,
    request_hash: &'a str,
    attempt_count: i32,
    external_reference: Option<&'a str>,
    response: Option<&'a Value>,
    error: Option<&'a AttemptError>,
    business_ref: Option<&'a str>,
    run_id: Option<&'a str>,
    step: Option<&'a str>,
    ordering_key: Option<&'a str>,
    deadline: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
}

impl<'a> From<&'a Intent> for IntentView<'a> {
    fn from(i: &'a Intent) -> Self {
        IntentView {
            idempotency_key: &i.idempotency_key,
            action: &i.action,
            status: i.status,
            request_hash: &i.request_hash,
            attempt_count: i.attempt_count,
            external_reference: i.external_reference.as_deref(),
            response: i.response.as_ref(),
            error: i.last_error.as_ref(),
            business_ref: i.business_ref.as_deref(),
            run_id: i.run_id.as_deref(),
            step: i.step.as_deref(),
            ordering_key: i.ordering_key.as_deref(),
            deadline: i.deadline,
            created_at: i.created_at,
            updated_at: i.updated_at,
            completed_at: i.completed_at,
        }
    }
}

/// The public view of `i`.
pub(crate) fn view(i: &Intent) -> IntentView<'_> {
    IntentView::from(i)
}

/// The caller's (tenant `tenant`'s) intent under `key`, or a 404 naming the key.
pub(crate) async fn find_own(state: &AppState, tenant: &str, key: &str) -> Result<Intent, Problem> {
    let missing = || Problem::new(StatusCode::NOT_FOUND, "no intent with this key").field("key");
    // A key that could never have been accepted names no intent (and never reaches SQL).
    oncebox_core::validate_key(key).map_err(|_| missing())?;
    intent_by_key(&state.pool, tenant, key)
        .await
        .map_err(Problem::internal)?
        .ok_or_else(missing)
}

/// Runs an operator's change on the caller's intent `key` in one transaction; answers with the
/// intent as the change left it.
pub(crate) async fn change(
    state: &AppState,
    tenant: &str,
    key: &str,
    f: impl AsyncFnOnce(&mut PgConnection, i64) -> Result<Intent, OpsError>,
) -> Result<Response, Problem> {
    let intent = find_own(state, tenant, key).await?;
    let mut tx = state.pool.begin().await.map_err(Problem::internal)?;
    let done = f(&mut tx, intent.id).await.map_err(|e| match e {
        OpsError::Refused(m) => Problem::new(StatusCode::CONFLICT, m).field("key"),
        OpsError::NotFound(m) => Problem::new(StatusCode::NOT_FOUND, m).field("key"),
        OpsError::Database(e) => Problem::internal(e),
    })?;
    tx.commit().await.map_err(Problem::internal)?;
    Ok(axum::Json(view(&done)).into_response())
}
