//! Search: an intent by its key or business reference.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;

use super::{intent_table, respond, respond_with};
use crate::AppState;
use crate::console::html::{Nav, intent_href};
use crate::console::{Signed, internal};

/// `/console/search?q=`: the intent with that key, or the intents with that business reference.
pub(crate) async fn search(
    State(state): State<Arc<AppState>>,
    Signed(s): Signed,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let query = q.get("q").map(|v| v.trim()).unwrap_or_default();
    if query.is_empty() {
        let body = html! { p.hint { "Enter an idempotency key or a business reference." } };
        return respond(&s, "Search", Nav::Search, body);
    }
    if query.chars().any(char::is_control) {
        // Neither a key nor a business reference holds one: nothing could match.
        let body = html! {
            p.error role="alert" {
                "q: a key or business reference holds no control character such as U+0000."
            }
        };
        return respond_with(StatusCode::BAD_REQUEST, &s, "Search", Nav::Search, body);
    }
    let found = match oncebox_store::console::search(&state.pool, &s.tenant_id, query).await {
        Ok(found) => found,
        Err(e) => return internal(e),
    };
    if let [only] = found.as_slice() {
        return Redirect::to(&intent_href(&only.idempotency_key)).into_response();
    }
    let body = html! {
        @if found.is_empty() {
            p.empty {
                "No intent of tenant " (s.tenant_id)
                " has the key or business reference " code { (query) } "."
            }
        } @else {
            p { (found.len()) " intents with business reference " code { (query) } ":" }
            (intent_table(&state, &found))
        }
    };
    respond(&s, "Search", Nav::Search, body)
}
