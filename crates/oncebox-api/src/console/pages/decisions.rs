//! The operator's decisions from the console — approve, reject, retry, resolve, cancel, each
//! with a reason — run through `oncebox_store::approvals` and `oncebox_store::ops` exactly as
//! the CLI's and the API's do.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use oncebox_store::Intent;
use oncebox_store::ops::{Actor, OpsError, Resolution};

use super::intent::intent_page;
use crate::AppState;
use crate::console::html::intent_href;
use crate::console::{checked_session, internal};

/// Runs one decision on intent `key` for the logged-in operator: its reason is required; a
/// refusal re-shows the intent page saying why (409), a success goes back to it (303).
async fn decide(
    state: &AppState,
    headers: &HeaderMap,
    key: &str,
    body: Body,
    what: &'static str,
    f: impl AsyncFnOnce(
        &mut sqlx::PgConnection,
        i64,
        &Actor,
        &str,
        &HashMap<String, String>,
    ) -> Result<Intent, Decision>,
) -> Response {
    let (s, form) = match checked_session(state, headers, body).await {
        Ok(checked) => checked,
        Err(answer) => return answer,
    };
    let reason = form.get("reason").map(|r| r.trim()).unwrap_or_default();
    if reason.is_empty() || reason.contains('\0') {
        let why = "reason: say why (what you checked at the receiver); every decision needs one.";
        return intent_page(state, &s, key, StatusCode::BAD_REQUEST, None, Some(why)).await;
    }
    let tenant = s.tenant_id.clone();
    let found = match oncebox_core::validate_key(key) {
        Err(_) => None,
        Ok(()) => match oncebox_store::intent_by_key(&state.pool, &tenant, key).await {
            Ok(found) => found,
            Err(e) => return internal(e),
        },
    };
    let Some(intent) = found else {
        return intent_page(state, &s, key, StatusCode::NOT_FOUND, None, None).await;
    };
    let actor = s.actor("console");
    let mut tx = match state.pool.begin().await {
        Ok(tx) => tx,
        Err(e) => return internal(e),
    };
    match f(&mut tx, intent.id, &actor, reason, &form).await {
        Ok(_) => {
            if let Err(e) = tx.commit().await {
                return internal(e);
            }
            tracing::info!(principal = %s.principal, tenant = %tenant, key, decision = what, "console decision");
            Redirect::to(&format!("{}?done={what}", intent_href(key))).into_response()
        }
        Err(Decision::Invalid(why)) => {
            drop(tx);
            intent_page(state, &s, key, StatusCode::BAD_REQUEST, None, Some(&why)).await
        }
        Err(Decision::Ops(OpsError::Refused(why) | OpsError::NotFound(why))) => {
            drop(tx);
            let why = format!("Refused: {why}");
            intent_page(state, &s, key, StatusCode::CONFLICT, None, Some(&why)).await
        }
        Err(Decision::Ops(OpsError::Database(e))) => internal(e),
    }
}

/// Why a decision was not made.
enum Decision {
    /// The form was incomplete (names the field).
    Invalid(String),
    /// The ops rules refused it, or the database failed.
    Ops(OpsError),
}

impl From<OpsError> for Decision {
    fn from(e: OpsError) -> Self {
        Decision::Ops(e)
    }
}

pub(crate) async fn retry(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    decide(
        &state,
        &headers,
        &key,
        body,
        "retry",
        async |tx, id, actor, why, _| Ok(oncebox_store::ops::retry(tx, id, actor, why).await?),
    )
    .await
}

pub(crate) async fn cancel(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    decide(
        &state,
        &headers,
        &key,
        body,
        "cancel",
        async |tx, id, actor, why, _| {
            Ok(oncebox_store::ops::cancel(tx, id, actor, Some(why)).await?)
        },
    )
    .await
}

pub(crate) async fn resolve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    decide(
        &state,
        &headers,
        &key,
        body,
        "resolve",
        async |tx, id, actor, why, form| {
            let reference = form
                .get("reference")
                .map(|r| r.trim())
                .filter(|r| !r.is_empty());
            if reference.is_some_and(|r| r.contains('\0')) {
                return Err(Decision::Invalid(
                    "reference: must not hold U+0000".to_owned(),
                ));
            }
            let resolution = match form.get("outcome").map(String::as_str) {
                Some("succeeded") => Resolution::Succeeded {
                    reference: reference.map(str::to_owned),
                },
                Some("failed") if reference.is_some() => {
                    return Err(Decision::Invalid(
                        "reference: a reference belongs to a succeeded resolution only".to_owned(),
                    ));
                }
                Some("failed") => Resolution::Failed {
                    reason: why.to_owned(),
                },
                _ => {
                    return Err(Decision::Invalid(
                        "outcome: choose whether the effect happened (succeeded) or not (failed)"
                            .to_owned(),
                    ));
                }
            };
            Ok(oncebox_store::ops::resolve(tx, id, &resolution, actor, Some(why)).await?)
        },
    )
    .await
}

pub(crate) async fn approve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    decide(
        &state,
        &headers,
        &key,
        body,
        "approve",
        async |tx, id, actor, why, _| {
            let approved = oncebox_store::approvals::approve(tx, id, actor, Some(why)).await?;
            Ok(approved.intent)
        },
    )
    .await
}

pub(crate) async fn reject(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    decide(
        &state,
        &headers,
        &key,
        body,
        "reject",
        async |tx, id, actor, why, _| {
            Ok(oncebox_store::approvals::reject(tx, id, actor, why).await?)
        },
    )
    .await
}
