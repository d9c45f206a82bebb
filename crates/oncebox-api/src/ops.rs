//! The ops endpoints (`/v1/ops/intents…`): list, show with history, retry and resolve — the
//! same rules as `oncebox ops`, behind an ops token and scoped to its tenant.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use oncebox_core::Status;
use oncebox_store::ops::Actor;
use oncebox_store::tokens::Caller;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::ops_caller;
use crate::intent::{change, find_own, view};
use crate::problem::Problem;

/// Largest `older_than_seconds` of the ops list: 100 years.
const MAX_OLDER_THAN_SECS: u64 = 100 * 365 * 24 * 3600;

#[derive(Debug, Deserialize)]
pub(crate) struct OpsListQuery {
    status: Option<String>,
    action: Option<String>,
    older_than_seconds: Option<u64>,
    limit: Option<i64>,
}

pub(crate) async fn ops_list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<OpsListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    let who = ops_caller(&state, &headers).await?;
    let Query(q) =
        query.map_err(|e| Problem::new(StatusCode::BAD_REQUEST, e.body_text()).field("query"))?;
    let status = q
        .status
        .as_deref()
        .map(str::parse::<Status>)
        .transpose()
        .map_err(|e| Problem::new(StatusCode::BAD_REQUEST, e.to_string()).field("status"))?;
    let bad =
        |field: &str, detail: String| Problem::new(StatusCode::BAD_REQUEST, detail).field(field);
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(bad(
            "limit",
            format!("limit must be 1 to 1000, not {limit}"),
        ));
    }
    if let Some(secs) = q.older_than_seconds
        && secs > MAX_OLDER_THAN_SECS
    {
        return Err(bad(
            "older_than_seconds",
            format!("older_than_seconds must be at most {MAX_OLDER_THAN_SECS} (100 years)"),
        ));
    }
    if q.action.as_deref().is_some_and(|a| a.contains('\0')) {
        return Err(bad("action", "action must not hold U+0000".into()));
    }
    let filter = oncebox_store::ops::ListFilter {
        status,
        tenant_id: Some(who.tenant_id),
        action: q.action,
        older_than: q.older_than_seconds.map(Duration::from_secs),
        limit,
    };
    let intents = oncebox_store::ops::list(&state.pool, &filter)
        .await
        .map_err(Problem::internal)?;
    Ok(
        axum::Json(json!({"intents": intents.iter().map(view).collect::<Vec<_>>()}))
            .into_response(),
    )
}

pub(crate) async fn ops_show(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Response, Problem> {
    let who = ops_caller(&state, &headers).await?;
    let intent = find_own(&state, &who.tenant_id, &key).await?;
    let history = oncebox_store::ops::history(&state.pool, intent.id)
        .await
        .map_err(Problem::internal)?;
    Ok(axum::Json(json!({"intent": view(&intent), "history": history})).into_response())
}

/// The optional text member `name` of an ops body: absent, or a string without U+0000.
fn text_member<'a>(
    body: &'a serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, Problem> {
    let bad = |detail: String| Problem::new(StatusCode::BAD_REQUEST, detail).field(name);
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.contains('\0') => {
            Err(bad(format!("{name} must not hold U+0000")))
        }
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(format!("{name} must be a string"))),
    }
}

/// Reads an optional small JSON object body (`{}` when empty).
async fn small_json(body: Body) -> Result<serde_json::Map<String, Value>, Problem> {
    let bytes = crate::problem::read_body(body, 16 * 1024).await?;
    if bytes.is_empty() {
        return Ok(serde_json::Map::new());
    }
    match crate::problem::json_body(&bytes)? {
        Value::Object(m) => Ok(m),
        _ => Err(
            Problem::new(StatusCode::BAD_REQUEST, "the body must be a JSON object").field("body"),
        ),
    }
}

/// An operator's change request: the caller (an ops token) and its small JSON body.
async fn ops_request(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Caller, serde_json::Map<String, Value>), Problem> {
    let who = ops_caller(state, headers).await?;
    Ok((who, small_json(body).await?))
}

pub(crate) async fn ops_retry(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Result<Response, Problem> {
    let (who, body) = ops_request(&state, &headers, body).await?;
    let reason = text_member(&body, "reason")?
        .unwrap_or("operator retry over the API")
        .to_owned();
    let actor = Actor::new(format!("token {}", who.id), "ops", "api");
    change(&state, &who.tenant_id, &key, async |tx, id| {
        oncebox_store::ops::retry(tx, id, &actor, &reason).await
    })
    .await
}

pub(crate) async fn ops_resolve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Result<Response, Problem> {
    let (who, body) = ops_request(&state, &headers, body).await?;
    let reference = text_member(&body, "reference")?;
    let reason = text_member(&body, "reason")?;
    let resolution = match (body.get("succeeded").and_then(Value::as_bool), reason) {
        (Some(true), _) => oncebox_store::ops::Resolution::Succeeded {
            reference: reference.map(str::to_owned),
        },
        (Some(false), _) if reference.is_some() => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "a reference belongs to a succeeded resolution only",
            )
            .field("reference"));
        }
        (Some(false), Some(reason)) if !reason.is_empty() => {
            oncebox_store::ops::Resolution::Failed {
                reason: reason.to_owned(),
            }
        }
        (Some(false), _) => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "a failed resolution needs a reason",
            )
            .field("reason"));
        }
        (None, _) => {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "succeeded (true or false) is required",
            )
            .field("succeeded"));
        }
    };
    let actor = Actor::new(format!("token {}", who.id), "ops", "api");
    change(&state, &who.tenant_id, &key, async |tx, id| {
        oncebox_store::ops::resolve(tx, id, &resolution, &actor, reason).await
    })
    .await
}
