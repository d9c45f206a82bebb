//! Search: an intent by its key or business reference.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};

use super::{intent_table, respond, respond_with};
use crate::AppState;
use crate::console::html::{Nav, esc, intent_href};
use crate::console::{internal, session};

pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let s = match session(&state, &headers).await {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let query = q.get("q").map(|v| v.trim()).unwrap_or_default();
    let mut body = String::new();
    if query.is_empty() {
        body.push_str("<p class=\"hint\">Enter an idempotency key or a business reference.</p>");
        return respond(&s, "Search", Nav::Search, &body);
    }
    if query.chars().any(char::is_control) {
        // Neither a key nor a business reference holds one: nothing could match.
        let _ = write!(
            body,
            "<p class=\"error\" role=\"alert\">q: a key or business reference holds no control \
             character such as U+0000.</p>"
        );
        return respond_with(StatusCode::BAD_REQUEST, &s, "Search", Nav::Search, &body);
    }
    let found = match oncebox_store::console::search(&state.pool, &s.caller.tenant_id, query).await
    {
        Ok(found) => found,
        Err(e) => return internal(e),
    };
    if let [only] = found.as_slice() {
        return Redirect::to(&intent_href(&only.idempotency_key)).into_response();
    }
    if found.is_empty() {
        let _ = write!(
            body,
            "<p class=\"empty\">No intent of tenant {} has the key or business reference <code>{}</code>.</p>",
            esc(&s.caller.tenant_id),
            esc(query)
        );
    } else {
        let _ = write!(
            body,
            "<p>{} intents with business reference <code>{}</code>:</p>",
            found.len(),
            esc(query)
        );
        intent_table(&state, &found, &mut body);
    }
    respond(&s, "Search", Nav::Search, &body)
}
