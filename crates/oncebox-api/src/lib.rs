//! The agent-facing HTTP API (DESIGN §6): orchestrators that do not share oncebox's database
//! submit intents with an `Idempotency-Key`, read results (with long-poll) and cancel.
//! Every request carries a bearer token; every query is scoped to the token's tenant. Errors are
//! `application/problem+json` (RFC 9457) naming the field.

mod problem;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use oncebox_core::{NewIntent, Status};
use oncebox_store::tokens::{Caller, authenticate};
use oncebox_store::{Intake, Intent, SubmitError, intent_by_key};
use serde::Deserialize;
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::sync::watch;

pub use problem::Problem;

/// Largest accepted request body by default.
pub const DEFAULT_BODY_LIMIT: usize = 256 * 1024;
/// Largest `older_than_seconds` of the ops list: 100 years.
const MAX_OLDER_THAN_SECS: u64 = 100 * 365 * 24 * 3600;
/// Longest `?wait=`, in seconds.
pub const MAX_WAIT_SECS: u64 = 60;
/// The OpenAPI 3.0 description of this API; `/openapi.json` serves it with the configured
/// actions filled in as the `action` enum.
pub const OPENAPI: &str = include_str!("openapi.json");

/// Requests answered, by method, route and status.
type RequestCounts = Arc<std::sync::Mutex<std::collections::BTreeMap<(String, String, u16), u64>>>;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    pool: PgPool,
    intake: Intake,
    body_limit: usize,
    done: watch::Receiver<u64>,
    requests: RequestCounts,
    openapi: Arc<str>,
    tokens: TokenCache,
}

/// How long a token, once found valid, is trusted without asking the database again: a revoked
/// token stops working within this time.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(5);

/// Tokens found valid, with when they were checked. Unknown tokens are never cached.
type TokenCache =
    Arc<std::sync::Mutex<std::collections::HashMap<String, (Caller, tokio::time::Instant)>>>;

impl AppState {
    /// State over `pool` accepting the actions of `intake`, listening for finished intents.
    ///
    /// # Errors
    /// The database's error when the LISTEN connection cannot be opened.
    pub async fn new(
        pool: PgPool,
        intake: Intake,
        body_limit: usize,
    ) -> Result<AppState, sqlx::Error> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&pool).await?;
        listener.listen(oncebox_store::DONE_CHANNEL).await?;
        let (tx, rx) = watch::channel(0u64);
        tokio::spawn(async move {
            // Each notification bumps a counter; waiters re-read their intent when it changes.
            // recv() reconnects by itself; a lost notification only delays a waiter to its timeout.
            loop {
                let heard = listener.recv().await;
                if tx.is_closed() {
                    // The server is gone (its state dropped): nobody is waiting.
                    return;
                }
                match heard {
                    Ok(_) => {
                        tx.send_modify(|n| *n += 1);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "LISTEN for finished intents failed; reconnecting");
                        tx.send_modify(|n| *n += 1);
                    }
                }
            }
        });
        let openapi = openapi_for(intake.actions());
        Ok(AppState {
            pool,
            intake,
            body_limit,
            done: rx,
            requests: RequestCounts::default(),
            openapi,
            tokens: TokenCache::default(),
        })
    }
}

/// [`OPENAPI`] with `actions` as the enum of `NewIntent.action`: the document says exactly which
/// requests this server accepts.
fn openapi_for<'a>(actions: impl Iterator<Item = &'a str>) -> Arc<str> {
    let mut doc: Value = serde_json::from_str(OPENAPI).unwrap_or_default();
    if let Some(action) = doc.pointer_mut("/components/schemas/NewIntent/properties/action") {
        action["enum"] = Value::Array(actions.map(|a| Value::String(a.to_owned())).collect());
    }
    doc.to_string().into()
}

/// The router: `/v1/intents…`, `/healthz`, `/readyz`.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/intents", post(submit))
        .route("/v1/intents/{key}", get(read))
        .route("/v1/intents/{key}/cancel", post(cancel))
        .route("/v1/ops/intents", get(ops_list))
        .route("/v1/ops/intents/{key}", get(ops_show))
        .route("/v1/ops/intents/{key}/retry", post(ops_retry))
        .route("/v1/ops/intents/{key}/resolve", post(ops_resolve))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/metrics", get(metrics))
        .route(
            "/openapi.json",
            get(|State(state): State<Arc<AppState>>| async move {
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    state.openapi.to_string(),
                )
            }),
        )
        .layer(axum::middleware::from_fn_with_state(
            state.requests.clone(),
            count_request,
        ))
        .with_state(Arc::new(state))
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, Problem> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            Problem::new(StatusCode::UNAUTHORIZED, "missing bearer token").field("authorization")
        })?;
    let token = token.trim();
    let now = tokio::time::Instant::now();
    let fresh = |at: &tokio::time::Instant| now - *at < TOKEN_CACHE_TTL;
    if let Some((who, _)) = lock(&state.tokens).get(token).filter(|(_, at)| fresh(at)) {
        return Ok(who.clone());
    }
    let mut conn = state.pool.acquire().await.map_err(Problem::internal)?;
    let who = authenticate(&mut conn, token)
        .await
        .map_err(Problem::internal)?
        .ok_or_else(|| {
            Problem::new(StatusCode::UNAUTHORIZED, "unknown or revoked token")
                .field("authorization")
        })?;
    let mut tokens = lock(&state.tokens);
    if tokens.len() >= 10_000 {
        tokens.retain(|_, (_, at)| fresh(at));
    }
    tokens.insert(token.to_owned(), (who.clone(), now));
    Ok(who)
}

/// Parses `Idempotency-Key`: a bare token or an RFC 8941 sf-string.
fn idempotency_key(headers: &HeaderMap) -> Result<String, Problem> {
    let bad =
        |detail: String| Problem::new(StatusCode::BAD_REQUEST, detail).field("Idempotency-Key");
    let raw = headers
        .get("idempotency-key")
        .ok_or_else(|| bad("the Idempotency-Key header is required".into()))?
        .to_str()
        .map_err(|_| bad("Idempotency-Key must be printable ASCII".into()))?
        .trim();
    let key = if let Some(inner) = raw.strip_prefix('"') {
        let inner = inner
            .strip_suffix('"')
            .ok_or_else(|| bad("unterminated sf-string".into()))?;
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(e @ ('"' | '\\')) => out.push(e),
                    _ => return Err(bad("invalid escape in sf-string".into())),
                },
                '"' => return Err(bad("unescaped quote in sf-string".into())),
                c => out.push(c),
            }
        }
        out
    } else {
        raw.to_owned()
    };
    oncebox_core::validate_key(&key).map_err(|e| bad(format!("Idempotency-Key {e}")))?;
    Ok(key)
}

/// The submit body, checked field by field so that every error names its field.
struct SubmitBody {
    action: String,
    arguments: Value,
    business_ref: Option<String>,
    run_id: Option<String>,
    step: Option<String>,
    deadline: Option<chrono::DateTime<chrono::Utc>>,
}

fn parse_body(bytes: &[u8]) -> Result<SubmitBody, Problem> {
    let bad =
        |field: &str, detail: String| Problem::new(StatusCode::BAD_REQUEST, detail).field(field);
    let doc: Value = serde_json::from_slice(bytes)
        .map_err(|e| bad("body", format!("the body is not JSON: {e}")))?;
    let Value::Object(mut map) = doc else {
        return Err(bad("body", "the body must be a JSON object".into()));
    };
    const KNOWN: [&str; 6] = [
        "action",
        "arguments",
        "business_ref",
        "run_id",
        "step",
        "deadline",
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
    })
}

/// The public view of an intent (no internal ids of other systems beyond the reference).
fn view(i: &Intent) -> Value {
    json!({
        "idempotency_key": i.idempotency_key,
        "action": i.action,
        "status": i.status,
        "request_hash": i.request_hash,
        "attempt_count": i.attempt_count,
        "external_reference": i.external_reference,
        "response": i.response,
        "error": i.last_error,
        "business_ref": i.business_ref,
        "run_id": i.run_id,
        "step": i.step,
        "deadline": i.deadline,
        "created_at": i.created_at,
        "updated_at": i.updated_at,
        "completed_at": i.completed_at,
    })
}

async fn submit(
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
    let bytes = to_bytes(body, state.body_limit).await.map_err(|_| {
        Problem::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body exceeds {} bytes", state.body_limit),
        )
        .field("body")
    })?;
    let body = parse_body(&bytes)?;
    let intent = NewIntent {
        tenant_id: who.tenant_id,
        idempotency_key: key,
        action: body.action,
        arguments: body.arguments,
        business_ref: body.business_ref,
        run_id: body.run_id,
        step: body.step,
        deadline: body.deadline.map(Into::into),
    };
    // The intent is all this request writes: one statement, committed by itself.
    let mut conn = state.pool.acquire().await.map_err(Problem::internal)?;
    let submitted = match state.intake.submit_alone(&mut conn, intent).await {
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

#[derive(Debug, Deserialize)]
struct ReadQuery {
    wait: Option<u64>,
}

async fn read(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
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
        let settled = intent.status.is_terminal() || intent.status == Status::NeedsReview;
        if settled || tokio::time::Instant::now() >= deadline {
            return Ok(axum::Json(view(&intent)).into_response());
        }
        // Woken by LISTEN/NOTIFY when intents finish; the deadline is the only timer. Should the
        // listener ever stop, wait out the deadline instead of spinning.
        let _ = tokio::time::timeout_at(deadline, async {
            if done.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await;
    }
}

async fn cancel(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Response, Problem> {
    let who = caller(&state, &headers).await?;
    let intent = find_own(&state, &who.tenant_id, &key).await?;
    let mut tx = state.pool.begin().await.map_err(Problem::internal)?;
    let done = ops_result(
        oncebox_store::ops::cancel(&mut tx, intent.id, &format!("api:{}", who.tenant_id)).await,
    )?;
    tx.commit().await.map_err(Problem::internal)?;
    Ok(axum::Json(view(&done)).into_response())
}

async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let applied: Result<i64, sqlx::Error> =
        sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
            .fetch_one(&state.pool)
            .await;
    let expected = oncebox_store::MIGRATOR.iter().count() as i64;
    match applied {
        Ok(n) if n >= expected => (StatusCode::OK, "ready\n").into_response(),
        Ok(n) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("migrations: {n} of {expected} applied\n"),
        )
            .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("database: {e}\n")).into_response(),
    }
}

async fn ops_caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, Problem> {
    let who = caller(state, headers).await?;
    if who.role != oncebox_store::tokens::Role::Ops {
        return Err(
            Problem::new(StatusCode::FORBIDDEN, "this endpoint needs an ops token")
                .field("authorization"),
        );
    }
    Ok(who)
}

#[derive(Debug, Deserialize)]
struct OpsListQuery {
    status: Option<String>,
    action: Option<String>,
    older_than_seconds: Option<u64>,
    limit: Option<i64>,
}

async fn ops_list(
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
    let mut conn = state.pool.acquire().await.map_err(Problem::internal)?;
    let intents = oncebox_store::ops::list(&mut conn, &filter)
        .await
        .map_err(Problem::internal)?;
    Ok(
        axum::Json(json!({"intents": intents.iter().map(view).collect::<Vec<_>>()}))
            .into_response(),
    )
}

async fn find_own(state: &AppState, tenant: &str, key: &str) -> Result<Intent, Problem> {
    let missing = || Problem::new(StatusCode::NOT_FOUND, "no intent with this key").field("key");
    // A key that could never have been accepted names no intent (and never reaches SQL).
    oncebox_core::validate_key(key).map_err(|_| missing())?;
    let mut conn = state.pool.acquire().await.map_err(Problem::internal)?;
    intent_by_key(&mut conn, tenant, key)
        .await
        .map_err(Problem::internal)?
        .ok_or_else(missing)
}

async fn ops_show(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Response, Problem> {
    let who = ops_caller(&state, &headers).await?;
    let intent = find_own(&state, &who.tenant_id, &key).await?;
    let mut conn = state.pool.acquire().await.map_err(Problem::internal)?;
    let history = oncebox_store::ops::history(&mut conn, intent.id)
        .await
        .map_err(Problem::internal)?;
    Ok(axum::Json(json!({"intent": view(&intent), "history": history})).into_response())
}

fn ops_result(r: Result<Intent, oncebox_store::ops::OpsError>) -> Result<Intent, Problem> {
    use oncebox_store::ops::OpsError;
    r.map_err(|e| match e {
        OpsError::Refused(m) => Problem::new(StatusCode::CONFLICT, m).field("key"),
        OpsError::NotFound(m) => Problem::new(StatusCode::NOT_FOUND, m).field("key"),
        OpsError::Database(e) => Problem::internal(e),
    })
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
    let bytes = to_bytes(body, 16 * 1024).await.map_err(|_| {
        Problem::new(StatusCode::PAYLOAD_TOO_LARGE, "the body exceeds 16 KiB").field("body")
    })?;
    if bytes.is_empty() {
        return Ok(serde_json::Map::new());
    }
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(
            Problem::new(StatusCode::BAD_REQUEST, "the body must be a JSON object").field("body"),
        ),
    }
}

async fn ops_retry(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Result<Response, Problem> {
    let who = ops_caller(&state, &headers).await?;
    let body = small_json(body).await?;
    let reason = text_member(&body, "reason")?
        .unwrap_or("operator retry over the API")
        .to_owned();
    let intent = find_own(&state, &who.tenant_id, &key).await?;
    let mut tx = state.pool.begin().await.map_err(Problem::internal)?;
    let done = ops_result(
        oncebox_store::ops::retry(
            &mut tx,
            intent.id,
            &format!("api-ops:{}", who.tenant_id),
            &reason,
        )
        .await,
    )?;
    tx.commit().await.map_err(Problem::internal)?;
    Ok(axum::Json(view(&done)).into_response())
}

async fn ops_resolve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Result<Response, Problem> {
    let who = ops_caller(&state, &headers).await?;
    let body = small_json(body).await?;
    let reference = text_member(&body, "reference")?;
    let reason = text_member(&body, "reason")?;
    let resolution = match (body.get("succeeded").and_then(Value::as_bool), reason) {
        (Some(true), _) => oncebox_store::ops::Resolution::Succeeded {
            reference: reference.map(str::to_owned),
        },
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
    let intent = find_own(&state, &who.tenant_id, &key).await?;
    let mut tx = state.pool.begin().await.map_err(Problem::internal)?;
    let done = ops_result(
        oncebox_store::ops::resolve(
            &mut tx,
            intent.id,
            &resolution,
            &format!("api-ops:{}", who.tenant_id),
        )
        .await,
    )?;
    tx.commit().await.map_err(Problem::internal)?;
    Ok(axum::Json(view(&done)).into_response())
}

/// Counts every answer by method, matched route (not the raw path: keys stay out of metrics)
/// and status.
async fn count_request(
    State(counts): State<RequestCounts>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let response = next.run(req).await;
    let status = response.status().as_u16();
    *lock(&counts).entry((method, route, status)).or_insert(0) += 1;
    response
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    use std::fmt::Write as _;
    let mut out = String::from(
        "# HELP oncebox_api_requests_total Requests answered, by method, route and status.\n# TYPE oncebox_api_requests_total counter\n",
    );
    for ((method, route, status), n) in lock(&state.requests).iter() {
        let _ = writeln!(
            out,
            "oncebox_api_requests_total{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
        );
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_document_lists_the_configured_actions() {
        let doc: Value = serde_json::from_str(&openapi_for(["a", "b"].into_iter())).expect("json");
        assert_eq!(doc["openapi"], "3.0.3");
        assert_eq!(
            doc.pointer("/components/schemas/NewIntent/properties/action/enum"),
            Some(&json!(["a", "b"]))
        );
    }
}
