//! "Awaiting approval": the tenant's intents that wait for people to approve them, oldest
//! first, with their redacted arguments and where their approvals stand. Each links to its
//! page, where a person approves or rejects it with a reason.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use super::{PAGE, destination_of, respond};
use crate::AppState;
use crate::console::html::{self, Nav, ago, columns, excerpt, intent_href};
use crate::console::{internal, session};

/// `/console/approvals`: the intents awaiting approval, oldest first.
pub(crate) async fn approvals(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let s = match session(&state, &headers).await {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let rows = match oncebox_store::approvals::awaiting(&state.pool, &s.tenant_id, None, PAGE).await
    {
        Ok(rows) => rows,
        Err(e) => return internal(e),
    };
    let body = html! {
        p.hint {
            "Nothing is sent until enough people approve it. Whoever submitted an intent may not "
            "approve it, and each person counts once. Unapproved when its window closes, it expires."
        }
        @if rows.is_empty() {
            p.empty { "Nothing awaits approval." }
        } @else {
            table.intents.approvals {
                (columns(&["key", "action", "arguments (redacted)", "approvals", "submitted", "window closes"]))
                tbody {
                    @for a in &rows {
                        @let i = &a.intent;
                        tr {
                            td { a href=(intent_href(&i.idempotency_key)) { code { (i.idempotency_key) } } }
                            td { (i.action) " → " (destination_of(&state, &i.action)) }
                            td { code { (excerpt(&i.payload.to_string(), 160)) } }
                            td { (a.approvals) " of " (a.approvals_needed.unwrap_or(1)) }
                            td title=(html::time(i.created_at)) { (ago(i.created_at)) }
                            td { (a.approval_expires_at.map_or("—".to_owned(), html::time)) }
                        }
                    }
                }
            }
        }
    };
    respond(&s, "Awaiting approval", Nav::Approvals, body)
}
