//! The agent's endpoints: `POST /v1/intents` (submit under an `Idempotency-Key`),
//! `GET /v1/intents/{key}` (with a `?wait=` long-poll woken by LISTEN/NOTIFY) and
//! `POST /v1/intents/{key}/cancel`. Every query is scoped to the caller's tenant.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncebox_core::NewIntent;
use oncebox_store::SubmitError;
use serde::Deserialize;
use serde_json::Value;

use crate::AppState;
use crate::auth::caller;
use crate::intent::{KeyPath, change, find_own, view};
use crate::problem::{Problem, Refused, TooManyRequests};
use oncebox_store::IntentView;

/// Longest `?wait=`, in seconds.
pub const MAX_WAIT_SECS: u64 = 60;

/// Parses `Idempotency-Key` ([`oncebox_core::key::parse_key_header`]).
fn idempotency_key(headers: &HeaderMap) -> Result<String, Problem> {
    let bad =
        |detail: String| Problem::new(StatusCode::BAD_REQUEST, detail).field("Idempotency-Key");
    let raw = headers
        .get("idempotency-key")
        .ok_or_else(|| bad("the Idempotency-Key header is required".into()))?
        .to_str()
        .map_err(|_| bad("Idempotency-Key must be printable ASCII".into()))?;
    oncebox_core::key::parse_key_header(raw).map_err(|e| bad(e.to_string()))
}

/// A new intent: the action, its arguments, and what the caller wants recorded with it.
// `parse_body` fills it field by field, so that every error names its field; its schema is
// the document's `NewIntent`.
#[derive(utoipa::ToSchema)]
#[schema(as = NewIntent)]
#[serde(deny_unknown_fields)]
pub(crate) struct SubmitBody {
    /// A configured action; the served document lists them.
    action: String,
    /// Any JSON object. Numbers beyond ±2^53 are refused, however written (send them as
    /// strings): RFC 8785 hashes numbers as IEEE doubles.
    #[schema(value_type = Object)]
    arguments: Value,
    /// The caller's own reference for the business object (an order number, say).
    business_ref: Option<String>,
    /// The agent run that asked.
    run_id: Option<String>,
    /// The step of that run.
    step: Option<String>,
    /// After this instant the intent is not delivered; it expires.
    deadline: Option<chrono::DateTime<chrono::Utc>>,
    /// Intents of this tenant to the same destination with the same ordering key are
    /// delivered one at a time, in submit order.
    #[schema(min_length = 1, max_length = 255)]
    ordering_key: Option<String>,
}

fn parse_body(bytes: &[u8]) -> Result<SubmitBody, Problem> {
    let bad =
        |field: &str, detail: String| Problem::new(StatusCode::BAD_REQUEST, detail).field(field);
    let doc = crate::problem::json_body(bytes)?;
    let Value::Object(mut map) = doc else {
        return Err(bad("body", "the body must be a JSON object".into()));
    };
    const KNOWN: [&str; 7] = [
        "action",
        "arguments",
        "business_ref",
        "run_id",
        "step",
        "deadline",
        "ordering_key",
    ];
    if let Some(unknown) = map.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(bad(
            unknown,
            format!(
                "unknown field {unknown:?}; expected one of {}",
                KNOWN.join(", ")
            ),
        ));
    }
    let action = match map.remove("action") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(bad("action", "action must be a string".into())),
        None => return Err(bad("action", "action is required".into())),
    };
    let arguments = map
        .remove("arguments")
        .ok_or_else(|| bad("arguments", "arguments is required".into()))?;
    let mut text = |name: &str| match map.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(name, format!("{name} must be a string"))),
    };
    let (business_ref, run_id, step) = (text("business_ref")?, text("run_id")?, text("step")?);
    let ordering_key = text("ordering_key")?;
    let deadline = text("deadline")?
        .map(|d| {
            chrono::DateTime::parse_from_rfc3339(&d)
                .map(|t| t.with_timezone(&chrono::Utc))
                .map_err(|e| bad("deadline", format!("deadline {d:?} is not RFC 3339: {e}")))
        })
        .transpose()?;
    Ok(SubmitBody {
        action,
        arguments,
        business_ref,
        run_id,
        step,
        deadline,
        ordering_key,
    })
}

/// `POST /v1/intents`.
#[utoipa::path(
    post,
    path = "/v1/intents",
    summary = "Submit an intent (idempotent by key)",
    params((
        "Idempotency-Key" = String,
        Header,
        description = "1-255 printable ASCII characters without spaces, as a bare token or an \
            RFC 8941 sf-string (\"...\" with \\\" and \\\\ escapes).",
        pattern = r#"^([!#-~][!-~]{0,254}|"([!#-\[\]-~]|\\["\\]){1,255}")$"#
    )),
    request_body(content = SubmitBody, content_type = "application/json"),
    responses(
        (status = 202, description = "Accepted: a new intent", body = IntentView),
        (status = 200, description = "A replay: the intent this key already names", body = IntentView),
        (status = 400, response = Refused),
        (status = 401, response = Refused),
        (status = 413, response = Refused),
        (status = 415, response = Refused),
        (status = 422, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
pub(crate) async fn submit(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Problem> {
    let who = caller(&state, &headers).await?;
    let key = idempotency_key(&headers)?;
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
    if !json_type {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be application/json",
        )
        .field("content-type"));
    }
    let bytes = crate::problem::read_body(body, state.body_limit).await?;
    let body = parse_body(&bytes)?;
    // Kept with the intent: the token that submits it may not approve it.
    let by = who.actor("api").who;
    let intent = NewIntent {
        tenant_id: who.tenant_id,
        idempotency_key: key,
        action: body.action,
        arguments: body.arguments,
        business_ref: body.business_ref,
        run_id: body.run_id,
        step: body.step,
        deadline: body.deadline.map(Into::into),
        ordering_key: body.ordering_key,
    };
    // The intent is all this request writes: one statement, committed by itself.
    let mut conn = state.pool.acquire().await.map_err(Problem::internal)?;
    let submitted = match state.intake.submit_alone_as(&mut conn, intent, &by).await {
        Ok(s) => s,
        Err(SubmitError::Invalid(e)) => {
            let status = if e.field == "action" {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::BAD_REQUEST
            };
            return Err(Problem::new(status, e.to_string()).field(&e.field));
        }
        Err(SubmitError::KeyConflict {
            submitted_hash,
            existing_hash,
            ..
        }) => {
            return Err(Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("this Idempotency-Key was already used with another request (request hash {existing_hash}; this one {submitted_hash})"),
            )
            .field("Idempotency-Key"));
        }
        Err(SubmitError::Store(e)) => return Err(Problem::internal(e)),
    };
    let status = if submitted.created {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(view(&submitted.intent))).into_response())
}

/// The query of a read.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReadQuery {
    /// Seconds to wait for the intent to become terminal or need review.
    #[param(minimum = 0, maximum = 60)]
    wait: Option<u64>,
}

/// `GET /v1/intents/{key}`.
#[utoipa::path(
    get,
    path = "/v1/intents/{key}",
    summary = "Read an intent; ?wait=N long-polls until it is terminal or needs review",
    params(KeyPath, ReadQuery),
    responses(
        (status = 200, description = "The intent", body = IntentView),
        (status = 400, response = Refused),
        (status = 401, response = Refused),
        (status = 404, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
pub(crate) async fn read(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(KeyPath { key }): Path<KeyPath>,
    query: Result<Query<ReadQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, Problem> {
    let who = caller(&state, &headers).await?;
    let Query(q) =
        query.map_err(|e| Problem::new(StatusCode::BAD_REQUEST, e.body_text()).field("wait"))?;
    let wait = q.wait.unwrap_or(0);
    if wait > MAX_WAIT_SECS {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            format!("wait is at most {MAX_WAIT_SECS} seconds"),
        )
        .field("wait"));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(wait);
    let mut done = state.done.clone();
    loop {
        done.mark_unchanged();
        let intent = find_own(&state, &who.tenant_id, &key).await?;
        if intent.status.is_settled() || tokio::time::Instant::now() >= deadline {
            return Ok(axum::Json(view(&intent)).into_response());
        }
        // Woken by LISTEN/NOTIFY when intents finish; the deadline is the only timer.
        oncebox_store::next_settlement(&mut done, deadline).await;
    }
}

/// `POST /v1/intents/{key}/cancel`.
#[utoipa::path(
    post,
    path = "/v1/intents/{key}/cancel",
    summary = "Cancel before dispatch",
    params(KeyPath),
    responses(
        (status = 200, description = "The cancelled intent", body = IntentView),
        (status = 401, response = Refused),
        (status = 404, response = Refused),
        (status = 409, response = Refused),
        (status = 429, response = TooManyRequests),
    )
)]
pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(KeyPath { key }): Path<KeyPath>,
) -> Result<Response, Problem> {
    let who = caller(&state, &headers).await?;
    let actor = who.actor("api");
    change(&state, &who.tenant_id, &key, async |tx, id| {
        oncebox_store::ops::cancel(tx, id, &actor, None).await
    })
    .await
}
