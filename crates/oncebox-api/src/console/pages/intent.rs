//! An intent's page: its facts, its history and audit rows, and the forms of the decisions an
//! operator may take on it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use oncebox_core::Status;
use oncebox_store::Intent;
use oncebox_store::console::Session;

use super::{destination_of, frame};
use crate::AppState;
use crate::console::html::{self, Badge, Nav, columns, excerpt, intent_href};
use crate::console::{Signed, internal};

/// `/console/intents/{key}`: one intent, with a note after a decision (`?done=`).
pub(crate) async fn intent(
    State(state): State<Arc<AppState>>,
    Signed(s): Signed,
    Path(key): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let note = q.get("done").map(|d| match d.as_str() {
        "retry" => "Retried: the intent is pending again, under the same key.",
        "resolve" => "Resolved.",
        "cancel" => "Cancelled.",
        "approve" => "Approval recorded.",
        "reject" => "Rejected: it will never be sent.",
        _ => "Done.",
    });
    intent_page(&state, &s, &key, StatusCode::OK, note, None).await
}

/// The intent page of `key`, with a note (after a decision) or an error (a refused one).
pub(super) async fn intent_page(
    state: &AppState,
    s: &Session,
    key: &str,
    status: StatusCode,
    note: Option<&str>,
    error: Option<&str>,
) -> Response {
    let tenant = &s.tenant_id;
    // A key that could never have been accepted names no intent (and never reaches SQL).
    let found = match oncebox_core::validate_key(key) {
        Err(_) => None,
        Ok(()) => match oncebox_store::intent_by_key(&state.pool, tenant, key).await {
            Ok(found) => found,
            Err(e) => return internal(e),
        },
    };
    let Some(i) = found else {
        let body = html! {
            p.error role="alert" {
                "Tenant " (tenant) " has no intent with the key " code { (key) } "."
            }
        };
        return crate::console::html(
            StatusCode::NOT_FOUND,
            html::page("No such intent", Nav::None, Some(&frame(s)), body),
        );
    };
    let (history, audit) = match tokio::try_join!(
        oncebox_store::ops::history(&state.pool, i.id),
        oncebox_store::ops::audit_log(&state.pool, Some(tenant), Some(key), 200),
    ) {
        Ok(both) => both,
        Err(e) => return internal(e),
    };
    let standing = match standing(state, &i).await {
        Ok(standing) => standing,
        Err(e) => return internal(e),
    };
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let response = i
        .response
        .as_ref()
        .map_or("—".to_owned(), |r| excerpt(&pretty(r), 4000));
    let body = html! {
        @if let Some(n) = note {
            p.note role="status" { (n) }
        }
        @if let Some(e) = error {
            p.error role="alert" { (e) }
        }
        (facts(state, &i))
        section.cols {
            div { h2 { "Arguments (redacted)" } pre { (excerpt(&pretty(&i.payload), 4000)) } }
            div { h2 { "Receiver's response" } pre { (response) } }
        }
        // The decisions this status allows.
        @if i.status == Status::AwaitingApproval {
            (approval(&i, s, standing.as_ref()))
        } @else {
            (decisions(&i, s))
        }
        (history_table(&history))
        (audit_table(&audit))
    };
    crate::console::html(
        status,
        html::page(
            &format!("Intent {}", excerpt(&i.idempotency_key, 60)),
            Nav::None,
            Some(&frame(s)),
            body,
        ),
    )
}

/// Where the approvals of `i` stand, while it awaits them.
async fn standing(
    state: &AppState,
    i: &Intent,
) -> Result<Option<oncebox_store::approvals::Awaiting>, sqlx::Error> {
    if i.status != Status::AwaitingApproval {
        return Ok(None);
    }
    let rows =
        oncebox_store::approvals::awaiting(&state.pool, &i.tenant_id, Some(i.id), None, 1).await?;
    Ok(rows.into_iter().next())
}

/// An intent's facts.
fn facts(state: &AppState, i: &Intent) -> Markup {
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "—".to_owned());
    let when = |t: Option<DateTime<Utc>>| t.map_or("—".to_owned(), html::time);
    let last_error = i.last_error.as_ref().map_or("—".to_owned(), |e| {
        format!(
            "{}{}: {}",
            e.code.as_str(),
            e.status_code
                .map_or(String::new(), |c| format!(" (HTTP {c})")),
            e.detail
        )
    });
    html! {
        section {
            dl.facts {
                dt { "key" } dd { code { (i.idempotency_key) } }
                dt { "delivery key" } dd { code { (i.delivery_key()) } }
                dt { "status" } dd { (Badge(i.status)) }
                dt { "action" } dd { (i.action) " → " (destination_of(state, &i.action)) }
                dt { "request hash" } dd { code { (i.request_hash) } }
                dt { "attempts" } dd { (i.attempt_count) }
                dt { "external reference" } dd { (opt(&i.external_reference)) }
                dt { "last error" } dd { (last_error) }
                dt { "submitted by" } dd { code { (opt(&i.submitted_by)) } }
                dt { "business reference" } dd { (opt(&i.business_ref)) }
                dt { "ordering key" } dd { (opt(&i.ordering_key)) }
                dt { "run / step" } dd { (opt(&i.run_id)) " / " (opt(&i.step)) }
                dt { "created" } dd { (when(Some(i.created_at))) }
                dt { "changed" } dd { (when(Some(i.updated_at))) }
                dt { "completed" } dd { (when(i.completed_at)) }
                dt { "deadline" } dd { (when(i.deadline)) }
            }
        }
    }
}

/// The retry report: every attempt, lookup and operator decision.
fn history_table(history: &[oncebox_store::ops::AttemptRow]) -> Markup {
    let dash = || "—".to_owned();
    html! {
        section {
            h2 { "History" }
            table.history {
                (columns(&["#", "phase", "by", "started", "latency", "outcome", "HTTP", "error", "detail"]))
                tbody {
                    @if history.is_empty() {
                        tr { td colspan="9" { "No attempt yet." } }
                    }
                    @for h in history {
                        tr class={ "p-" (h.phase_name()) } {
                            td { (h.attempt) }
                            td { (h.phase_name()) }
                            td { code { (h.worker) } }
                            td { (html::time(h.started_at)) }
                            td {
                                (h.finished_at.map_or_else(dash, |f| {
                                    format!("{} ms", (f - h.started_at).num_milliseconds())
                                }))
                            }
                            td { (h.outcome.map_or_else(dash, |o| o.as_str().to_owned())) }
                            td { (h.status_code.map_or_else(dash, |c| c.to_string())) }
                            td { (h.error_code.map_or_else(dash, |c| c.as_str().to_owned())) }
                            td { (excerpt(h.detail.as_deref().unwrap_or("—"), 300)) }
                        }
                    }
                }
            }
        }
    }
}

/// The audit rows of an intent.
fn audit_table(audit: &[oncebox_store::ops::AuditRow]) -> Markup {
    html! {
        section {
            h2 { "Audit" }
            table.audit {
                (columns(&["when", "who", "role", "via", "decision", "status", "reason"]))
                tbody {
                    @if audit.is_empty() {
                        tr { td colspan="7" { "No operator has decided anything about this intent." } }
                    }
                    @for a in audit {
                        tr {
                            td { (html::time(a.at)) }
                            td {
                                (a.actor)
                                @if let Some(l) = &a.label { " (" (l) ")" }
                            }
                            td { (a.role) }
                            td { (a.via) }
                            td { (a.action) }
                            td {
                                (Badge(a.status_before)) " → "
                                (Badge(a.status_after))
                            }
                            td { (a.reason.as_deref().unwrap_or("—")) }
                        }
                    }
                }
            }
        }
    }
}

/// The forms of an intent awaiting approval: approve or reject it, with a reason; above them,
/// where its approvals stand.
fn approval(
    i: &Intent,
    s: &Session,
    standing: Option<&oncebox_store::approvals::Awaiting>,
) -> Markup {
    let action = |what: &str| format!("{}/{what}", intent_href(&i.idempotency_key));
    let csrf = html! { input type="hidden" name="csrf" value=(s.csrf); };
    html! {
        section.decide {
            h2 { "Approve or reject" }
            @if let Some(a) = standing {
                p.standing {
                    b { (a.approvals) " of " (a.approvals_needed.unwrap_or(1)) " approvals" }
                    @if let Some(t) = a.approval_expires_at {
                        " · unapproved, it expires at " (html::time(t))
                    }
                }
            }
            p.hint {
                "Nothing has been sent. Approving records your approval; the last one it needs "
                "sends it. Whoever submitted it may not approve it, and each person counts once."
            }
            form.inline method="post" action=(action("originals")) {
                (csrf)
                button.link type="submit" { "Show the fields as they will execute" }
                span.hint { " (the values the receiver will get, redacted ones included; your view is recorded in the audit log)" }
            }
            div.cols {
                form.card method="post" action=(action("approve")) {
                    h3 { "Approve" }
                    (csrf)
                    label for="approve-reason" { "Reason" }
                    textarea id="approve-reason" name="reason" rows="2" required
                        placeholder="What you checked before approving" {}
                    button type="submit" { "Approve" }
                }
                form.card method="post" action=(action("reject")) {
                    h3 { "Reject" }
                    (csrf)
                    p.hint { "It ends rejected and is never sent." }
                    label for="reject-reason" { "Reason" }
                    textarea id="reject-reason" name="reason" rows="2" required
                        placeholder="Why it must not happen" {}
                    button type="submit" { "Reject" }
                }
            }
        }
    }
}

/// The forms of the decisions `i`'s status allows an operator, each asking for a reason.
fn decisions(i: &Intent, s: &Session) -> Markup {
    let allowed = |to: Status| i.status.operator_transition(to).is_ok();
    let (retry, resolve, cancel) = (
        allowed(Status::Pending),
        allowed(Status::Succeeded) || allowed(Status::Failed),
        allowed(Status::Cancelled),
    );
    let action = |what: &str| format!("{}/{what}", intent_href(&i.idempotency_key));
    let csrf = html! { input type="hidden" name="csrf" value=(s.csrf); };
    let reason = |id: &str| {
        html! {
            label for=(id) { "Reason" }
            textarea id=(id) name="reason" rows="2" required
                placeholder="What you checked at the receiver, and why" {}
        }
    };
    html! {
        @if retry || resolve || cancel {
            section.decide {
                h2 { "Decide" }
                div.cols {
                    @if resolve {
                        form.card method="post" action=(action("resolve")) {
                            h3 { "Resolve" }
                            (csrf)
                            fieldset {
                                legend { "The effect at the receiver" }
                                label {
                                    input type="radio" name="outcome" value="succeeded" required;
                                    " happened (succeeded)"
                                }
                                label {
                                    input type="radio" name="outcome" value="failed";
                                    " did not and will not happen (failed)"
                                }
                            }
                            label for="reference" { "Receiver's reference (if it happened)" }
                            input id="reference" name="reference" autocomplete="off";
                            (reason("resolve-reason"))
                            button type="submit" { "Resolve" }
                        }
                    }
                    @if retry {
                        form.card method="post" action=(action("retry")) {
                            h3 { "Retry" }
                            (csrf)
                            p.hint { "Sends the same request again under the same key." }
                            (reason("retry-reason"))
                            button type="submit" { "Retry" }
                        }
                    }
                    @if cancel {
                        form.card method="post" action=(action("cancel")) {
                            h3 { "Cancel" }
                            (csrf)
                            p.hint { "Only before any attempt was dispatched." }
                            (reason("cancel-reason"))
                            button type="submit" { "Cancel" }
                        }
                    }
                }
            }
        }
    }
}
