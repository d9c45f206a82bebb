//! "Awaiting approval": the tenant's intents that wait for people to approve them, oldest
//! first, counted and paged, with their redacted arguments, where their approvals stand, and
//! those whose window closes within the hour marked. Each links to its page, where a person
//! approves or rejects it with a reason.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use oncebox_store::approvals::Awaiting;

use super::attention::cursor;
use super::{PAGE, destination_of, respond};
use crate::AppState;
use crate::console::html::{self, Nav, ago, columns, excerpt, intent_href, url_part};
use crate::console::{Signed, internal};

/// A window closing sooner than this is marked.
const SOON: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// `/console/approvals[?after=CURSOR]`: the intents awaiting approval, oldest first, a page at
/// a time, with how many wait in all and when the first window closes.
pub(crate) async fn approvals(
    State(state): State<Arc<AppState>>,
    Signed(s): Signed,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let after = q.get("after").and_then(|a| cursor(a));
    let pool = &state.pool;
    let (rows, waiting) = match tokio::try_join!(
        oncebox_store::approvals::awaiting(pool, &s.tenant_id, None, after, PAGE),
        oncebox_store::approvals::waiting(pool, &s.tenant_id),
    ) {
        Ok(found) => found,
        Err(e) => return internal(e),
    };
    let now = Utc::now();
    let body = html! {
        p.hint {
            "Nothing is sent until enough people approve it. Whoever submitted an intent may not "
            "approve it, and each person counts once. Unapproved when its window closes, it expires."
        }
        p.count role="status" {
            @if waiting.waiting == 0 {
                "Nothing awaits approval."
            } @else {
                b { (waiting.waiting) } " await approval"
                @if let Some(first) = waiting.first_expiry {
                    "; the first window closes " (closes(first, now))
                }
                "."
            }
        }
        @if after.is_some() {
            p.pager { a href="/console/approvals" { "← Oldest first" } }
        }
        @if !rows.is_empty() {
            table.intents.approvals {
                (columns(&["key", "action", "arguments (redacted)", "approvals", "submitted", "window closes"]))
                tbody {
                    @for a in &rows {
                        @let i = &a.intent;
                        @let soon = a.approval_expires_at.is_some_and(|t| t - now < SOON);
                        tr.soon[soon] {
                            td { a href=(intent_href(&i.idempotency_key)) { code { (i.idempotency_key) } } }
                            td { (i.action) " → " (destination_of(&state, &i.action)) }
                            td { code { (excerpt(&i.payload.to_string(), 160)) } }
                            td { (a.approvals) " of " (a.approvals_needed.unwrap_or(1)) }
                            td title=(html::time(i.created_at)) { (ago(i.created_at)) }
                            td {
                                @match a.approval_expires_at {
                                    Some(t) => {
                                        span title=(html::time(t)) { (closes(t, now)) }
                                        @if soon { " " span.badge.warn { "soon" } }
                                    }
                                    None => "—",
                                }
                            }
                        }
                    }
                }
            }
            @if rows.len() as i64 == PAGE {
                (pager(&rows))
            }
        }
    };
    respond(&s, "Awaiting approval", Nav::Approvals, body)
}

/// When a window closes, for people: "in 23 min", or the time when further off.
fn closes(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let left = at - now;
    if left <= chrono::TimeDelta::zero() {
        "now".to_owned()
    } else if left < SOON {
        format!("in {} min", left.num_minutes().max(1))
    } else {
        format!("at {}", html::time(at))
    }
}

/// The link to the next page, after the last row shown.
fn pager(rows: &[Awaiting]) -> Markup {
    let Some(last) = rows.last().map(|a| &a.intent) else {
        return html! {};
    };
    let at = last
        .created_at
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let after = url_part(&format!("{at},{}", last.id));
    html! {
        p.pager { a href={ "/console/approvals?after=" (after) } { "Next " (PAGE) " →" } }
    }
}
