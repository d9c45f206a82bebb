//! What the API shows of an intent, and how a request finds its caller's intent: a leaf that the
//! agent's endpoints (`intents`) and the operator's (`ops`) both use, so neither needs the
//! other.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oncebox_store::ops::OpsError;
use oncebox_store::{Intent, IntentView, intent_by_key};
use sqlx::PgConnection;

use crate::AppState;
use crate::problem::Problem;

/// The `{key}` of a path: the caller's idempotency key.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct KeyPath {
    /// The intent's idempotency key.
    #[param(min_length = 1, max_length = 255)]
    pub(crate) key: String,
}

/// The public view of `i`: one type for the API, the ops API and the MCP gateway's results.
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
