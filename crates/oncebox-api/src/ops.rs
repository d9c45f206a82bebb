//! The ops endpoints (`/v1/ops/intents…`): list, show with history, approve, reject, retry and
//! resolve — the same rules as `oncebox ops`, behind an ops token and scoped to its tenant.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use oncebox_core::Status;
use oncebox_store::tokens::Caller;
use serde::Deserialize;
use serde_json::Value;

use crate::AppState;
use crate::auth::ops_caller;
use crate::intent::{KeyPath, change, find_own, view};
use crate::problem::{Problem, Refused, TooManyRequests};
use oncebox_store::IntentView;
use oncebox_store::ops::AttemptRow;

/// Largest `older_than_seconds` of the ops list: 100 years.
const MAX_OLDER_THAN_SECS: u64 = 100 * 365 * 24 * 3600;

/// The query of the ops list.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct OpsListQuery {
    /// Only intents in this status.
    #[param(value_type = Option<Status>)]
    status: Option<String>,
    /// Only intents of this action.
    action: Option<String>,
    /// Only intents created at least this many seconds ago.
    #[param(minimum = 0, maximum = 3153600000_u64)]
    older_than_seconds: Option<u64>,
    /// At most this many intents (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// The answer of the ops list.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct IntentList<'a> {
    /// Newest first.
    intents: Vec<IntentView<'a>>,
}

/// The answer of the ops show: an intent and its history.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub(crate) struct IntentWithHistory<'a> {
    /// The intent.
    intent: IntentView<'a>,
    /// Its attempts and operators' decisions, oldest first.
    history: Vec<AttemptRow>,
}

/// `GET /v1/ops/intents`.
#[utoipa::path(
    get,
    path = "/v1/ops/intents",
    summary = "List the tenant's intents (ops token)",
    params(OpsListQuery),
    responses(
        (status = 200, description = "Intents", body = IntentList),
        (status = 400, response = Refused),
        (status = 401, response = Refused),
        (status = 403, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
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
    let intents = intents.iter().map(view).collect();
    Ok(axum::Json(IntentList { intents }).into_response())
}

/// `GET /v1/ops/intents/{key}`.
#[utoipa::path(
    get,
    path = "/v1/ops/intents/{key}",
    summary = "An intent and its history (ops token)",
    params(KeyPath),
    responses(
        (status = 200, description = "The intent and its history", body = IntentWithHistory),
        (status = 401, response = Refused),
        (status = 403, response = Refused),
        (status = 404, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
pub(crate) async fn ops_show(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(KeyPath { key }): Path<KeyPath>,
) -> Result<Response, Problem> {
    let who = ops_caller(&state, &headers).await?;
    let intent = find_own(&state, &who.tenant_id, &key).await?;
    let history = oncebox_store::ops::history(&state.pool, intent.id)
        .await
        .map_err(Problem::internal)?;
    let intent = view(&intent);
    Ok(axum::Json(IntentWithHistory { intent, history }).into_response())
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

/// Reads an optional small JSON object body (`{}` when empty or `null`).
async fn small_json(body: Body) -> Result<serde_json::Map<String, Value>, Problem> {
    let bytes = crate::problem::read_body(body, 16 * 1024).await?;
    if bytes.is_empty() {
        return Ok(serde_json::Map::new());
    }
    match crate::problem::json_body(&bytes)? {
        Value::Object(m) => Ok(m),
        // The document allows `null` where the body is optional: the same as no body.
        Value::Null => Ok(serde_json::Map::new()),
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

/// The body of a retry (optional).
#[derive(utoipa::ToSchema)]
pub(crate) struct RetryBody<'a> {
    /// Why, for the audit log.
    reason: Option<&'a str>,
}

impl<'a> RetryBody<'a> {
    fn from_map(body: &'a serde_json::Map<String, Value>) -> Result<RetryBody<'a>, Problem> {
        Ok(RetryBody {
            reason: text_member(body, "reason")?,
        })
    }
}

/// The body of a resolve: `succeeded` true (with the receiver's reference, when known) or
/// false (with a reason).
#[derive(utoipa::ToSchema)]
pub(crate) struct ResolveBody<'a> {
    /// Whether the effect happened.
    #[schema(value_type = bool, required = true)]
    succeeded: Option<bool>,
    /// The receiver's reference of the effect; only when `succeeded` is true.
    reference: Option<&'a str>,
    /// Why; required when `succeeded` is false.
    reason: Option<&'a str>,
}

impl<'a> ResolveBody<'a> {
    fn from_map(body: &'a serde_json::Map<String, Value>) -> Result<ResolveBody<'a>, Problem> {
        Ok(ResolveBody {
            succeeded: body.get("succeeded").and_then(Value::as_bool),
            reference: text_member(body, "reference")?,
            reason: text_member(body, "reason")?,
        })
    }
}

/// `POST /v1/ops/intents/{key}/retry`.
#[utoipa::path(
    post,
    path = "/v1/ops/intents/{key}/retry",
    summary = "failed or needs_review -> pending, same key (ops token)",
    params(KeyPath),
    request_body(content = Option<RetryBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "The intent, pending again", body = IntentView),
        (status = 400, response = Refused),
        (status = 401, response = Refused),
        (status = 403, response = Refused),
        (status = 404, response = Refused),
        (status = 409, response = Refused),
        (status = 413, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
pub(crate) async fn ops_retry(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(KeyPath { key }): Path<KeyPath>,
    body: Body,
) -> Result<Response, Problem> {
    let (who, body) = ops_request(&state, &headers, body).await?;
    let reason = RetryBody::from_map(&body)?
        .reason
        .unwrap_or("operator retry over the API")
        .to_owned();
    let actor = who.actor("api");
    change(&state, &who.tenant_id, &key, async |tx, id| {
        oncebox_store::ops::retry(tx, id, &actor, &reason).await
    })
    .await
}

/// `POST /v1/ops/intents/{key}/resolve`.
#[utoipa::path(
    post,
    path = "/v1/ops/intents/{key}/resolve",
    summary = "Decide an intent that needs review (ops token)",
    params(KeyPath),
    request_body(content = ResolveBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The decided intent", body = IntentView),
        (status = 400, response = Refused),
        (status = 401, response = Refused),
        (status = 403, response = Refused),
        (status = 404, response = Refused),
        (status = 409, response = Refused),
        (status = 413, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
pub(crate) async fn ops_resolve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(KeyPath { key }): Path<KeyPath>,
    body: Body,
) -> Result<Response, Problem> {
    let (who, body) = ops_request(&state, &headers, body).await?;
    let ResolveBody {
        succeeded,
        reference,
        reason,
    } = ResolveBody::from_map(&body)?;
    let resolution = match (succeeded, reason) {
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
    let actor = who.actor("api");
    change(&state, &who.tenant_id, &key, async |tx, id| {
        oncebox_store::ops::resolve(tx, id, &resolution, &actor, reason).await
    })
    .await
}

/// The body of an approve or a reject: why (required to reject).
#[derive(utoipa::ToSchema)]
pub(crate) struct DecisionBody<'a> {
    /// Why, for the audit log.
    reason: Option<&'a str>,
}

impl<'a> DecisionBody<'a> {
    fn from_map(body: &'a serde_json::Map<String, Value>) -> Result<DecisionBody<'a>, Problem> {
        Ok(DecisionBody {
            reason: text_member(body, "reason")?,
        })
    }
}

/// `POST /v1/ops/intents/{key}/approve`.
#[utoipa::path(
    post,
    path = "/v1/ops/intents/{key}/approve",
    summary = "Approve an intent awaiting approval (ops token; not the one that submitted it)",
    params(KeyPath),
    request_body(content = Option<DecisionBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "The intent: still awaiting_approval, or pending once the last approval it needs is in", body = IntentView),
        (status = 400, response = Refused),
        (status = 401, response = Refused),
        (status = 403, response = Refused),
        (status = 404, response = Refused),
        (status = 409, response = Refused),
        (status = 413, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
pub(crate) async fn ops_approve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(KeyPath { key }): Path<KeyPath>,
    body: Body,
) -> Result<Response, Problem> {
    let (who, body) = ops_request(&state, &headers, body).await?;
    let reason = DecisionBody::from_map(&body)?.reason;
    let actor = who.actor("api");
    change(&state, &who.tenant_id, &key, async |tx, id| {
        oncebox_store::approvals::approve(tx, id, &actor, reason)
            .await
            .map(|a| a.intent)
    })
    .await
}

/// `POST /v1/ops/intents/{key}/reject`.
#[utoipa::path(
    post,
    path = "/v1/ops/intents/{key}/reject",
    summary = "Reject an intent awaiting approval: it ends rejected, never sent (ops token)",
    params(KeyPath),
    request_body(content = DecisionBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The rejected intent", body = IntentView),
        (status = 400, response = Refused),
        (status = 401, response = Refused),
        (status = 403, response = Refused),
        (status = 404, response = Refused),
        (status = 409, response = Refused),
        (status = 413, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
pub(crate) async fn ops_reject(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(KeyPath { key }): Path<KeyPath>,
    body: Body,
) -> Result<Response, Problem> {
    let (who, body) = ops_request(&state, &headers, body).await?;
    let Some(reason) = DecisionBody::from_map(&body)?
        .reason
        .filter(|r| !r.trim().is_empty())
    else {
        return Err(
            Problem::new(StatusCode::BAD_REQUEST, "a rejection needs a reason").field("reason"),
        );
    };
    let actor = who.actor("api");
    change(&state, &who.tenant_id, &key, async |tx, id| {
        oncebox_store::approvals::reject(tx, id, &actor, reason).await
    })
    .await
}
