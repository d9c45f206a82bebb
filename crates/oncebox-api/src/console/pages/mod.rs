//! The console's pages: awaiting approval, overview, needs a person, search, an intent with its
//! history and audit rows, and the operator's decisions (approve, reject, retry, resolve, cancel
//! — each with a reason), which run through `oncebox_store::approvals` and `oncebox_store::ops`
//! exactly as the CLI's and the API's do.

mod approvals;
mod attention;
mod decisions;
mod intent;
mod originals;
mod overview;
mod search;

use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use oncebox_store::Intent;
use oncebox_store::console::Session;

use super::html::{self, Badge, Frame, Nav, ago, columns, excerpt, intent_href};
use crate::AppState;

pub(crate) use approvals::approvals;
pub(crate) use attention::attention;
pub(crate) use decisions::{approve, cancel, reject, resolve, retry};
pub(crate) use intent::intent;
pub(crate) use originals::originals;
pub(crate) use overview::overview;
pub(crate) use search::search;

/// Intents per page of "Needs a person".
const PAGE: i64 = 50;

fn frame(s: &Session) -> Frame<'_> {
    Frame {
        tenant: &s.tenant_id,
        principal: s.principal.to_string(),
        label: s.label.as_deref(),
        csrf: &s.csrf,
    }
}

fn respond(s: &Session, title: &str, nav: Nav, body: Markup) -> Response {
    respond_with(StatusCode::OK, s, title, nav, body)
}

/// A page of the logged-in console with `status`.
fn respond_with(status: StatusCode, s: &Session, title: &str, nav: Nav, body: Markup) -> Response {
    super::html(status, html::page(title, nav, Some(&frame(s)), body))
}

/// The destination an action delivers to, by the configuration.
fn destination_of<'a>(state: &'a AppState, action: &str) -> &'a str {
    state
        .console
        .destinations
        .iter()
        .find(|(_, actions)| actions.iter().any(|a| a == action))
        .map_or("—", |(d, _)| d.as_str())
}

/// A table of intents, each linking to its page.
fn intent_table(state: &AppState, rows: &[Intent]) -> Markup {
    html! {
        table.intents {
            (columns(&["key", "status", "action", "destination", "attempts", "last error", "changed"]))
            tbody {
                @for i in rows {
                    tr {
                        td { a href=(intent_href(&i.idempotency_key)) { code { (i.idempotency_key) } } }
                        td { (Badge(i.status)) }
                        td { (i.action) }
                        td { (destination_of(state, &i.action)) }
                        td { (i.attempt_count) }
                        td {
                            @if let Some(e) = &i.last_error {
                                (e.code.as_str()) ": " (excerpt(&e.detail, 80))
                            }
                        }
                        td title=(html::time(i.updated_at)) { (ago(i.updated_at)) }
                    }
                }
            }
        }
    }
}
