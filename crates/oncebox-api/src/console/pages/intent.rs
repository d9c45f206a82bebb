//! An intent's page: its facts, its history and audit rows, and the forms of the decisions an
//! operator may take on it.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use chrono::{DateTime, Utc};
use oncebox_core::Status;
use oncebox_store::Intent;
use oncebox_store::console::Session;

use super::{destination_of, frame};
use crate::AppState;
use crate::console::html::{self, Nav, badge, esc, excerpt, intent_href};
use crate::console::{internal, session};

pub(crate) async fn intent(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let s = match session(&state, &headers).await {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let note = q.get("done").map(|d| match d.as_str() {
        "retry" => "Retried: the intent is pending again, under the same key.",
        "resolve" => "Resolved.",
        "cancel" => "Cancelled.",
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
    let tenant = &s.caller.tenant_id;
    // A key that could never have been accepted names no intent (and never reaches SQL).
    let found = match oncebox_core::validate_key(key) {
        Err(_) => None,
        Ok(()) => match oncebox_store::intent_by_key(&state.pool, tenant, key).await {
            Ok(found) => found,
            Err(e) => return internal(e),
        },
    };
    let Some(i) = found else {
        let body = format!(
            "<p class=\"error\" role=\"alert\">Tenant {} has no intent with the key <code>{}</code>.</p>",
            esc(tenant),
            esc(key)
        );
        return crate::console::html(
            StatusCode::NOT_FOUND,
            html::page("No such intent", Nav::None, Some(&frame(s)), &body),
        );
    };
    let (history, audit) = match tokio::try_join!(
        oncebox_store::ops::history(&state.pool, i.id),
        oncebox_store::ops::audit_log(&state.pool, Some(tenant), Some(key), 200),
    ) {
        Ok(both) => both,
        Err(e) => return internal(e),
    };
    let mut body = String::new();
    if let Some(n) = note {
        let _ = write!(body, "<p class=\"note\" role=\"status\">{}</p>", esc(n));
    }
    if let Some(e) = error {
        let _ = write!(body, "<p class=\"error\" role=\"alert\">{}</p>", esc(e));
    }
    facts(state, &i, &mut body);
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default();
    let _ = write!(
        body,
        "<section class=\"cols\"><div><h2>Arguments (redacted)</h2><pre>{}</pre></div>",
        esc(&excerpt(&pretty(&i.payload), 4000))
    );
    let _ = write!(
        body,
        "<div><h2>Receiver's response</h2><pre>{}</pre></div></section>",
        esc(&i
            .response
            .as_ref()
            .map_or("—".to_owned(), |r| excerpt(&pretty(r), 4000)))
    );

    // The decisions this status allows.
    decisions(&i, s, &mut body);

    history_table(&history, &mut body);
    audit_table(&audit, &mut body);
    crate::console::html(
        status,
        html::page(
            &format!("Intent {}", excerpt(&i.idempotency_key, 60)),
            Nav::None,
            Some(&frame(s)),
            &body,
        ),
    )
}

/// An intent's facts.
fn facts(state: &AppState, i: &Intent, body: &mut String) {
    let opt = |v: &Option<String>| v.as_deref().map_or("—".to_owned(), esc);
    let when = |t: Option<DateTime<Utc>>| t.map_or("—".to_owned(), |t| esc(&html::time(t)));
    let last_error = i.last_error.as_ref().map_or("—".to_owned(), |e| {
        esc(&format!(
            "{}{}: {}",
            e.code.as_str(),
            e.status_code
                .map_or(String::new(), |c| format!(" (HTTP {c})")),
            e.detail
        ))
    });
    let _ = write!(
        body,
        "<section><dl class=\"facts\">\
         <dt>key</dt><dd><code>{}</code></dd>\
         <dt>status</dt><dd>{}</dd>\
         <dt>action</dt><dd>{} → {}</dd>\
         <dt>request hash</dt><dd><code>{}</code></dd>\
         <dt>attempts</dt><dd>{}</dd>\
         <dt>external reference</dt><dd>{}</dd>\
         <dt>last error</dt><dd>{}</dd>\
         <dt>business reference</dt><dd>{}</dd>\
         <dt>ordering key</dt><dd>{}</dd>\
         <dt>run / step</dt><dd>{} / {}</dd>\
         <dt>created</dt><dd>{}</dd><dt>changed</dt><dd>{}</dd>\
         <dt>completed</dt><dd>{}</dd><dt>deadline</dt><dd>{}</dd>\
         </dl></section>",
        esc(&i.idempotency_key),
        badge(i.status.as_str()),
        esc(&i.action),
        esc(destination_of(state, &i.action)),
        esc(&i.request_hash),
        i.attempt_count,
        opt(&i.external_reference),
        last_error,
        opt(&i.business_ref),
        opt(&i.ordering_key),
        opt(&i.run_id),
        opt(&i.step),
        when(Some(i.created_at)),
        when(Some(i.updated_at)),
        when(i.completed_at),
        when(i.deadline),
    );
}

/// The retry report: every attempt, lookup and operator decision.
fn history_table(history: &[oncebox_store::ops::AttemptRow], body: &mut String) {
    body.push_str(
        "<section><h2>History</h2><table class=\"history\"><thead><tr>\
         <th scope=\"col\">#</th><th scope=\"col\">phase</th><th scope=\"col\">by</th>\
         <th scope=\"col\">started</th><th scope=\"col\">latency</th>\
         <th scope=\"col\">outcome</th><th scope=\"col\">HTTP</th><th scope=\"col\">error</th>\
         <th scope=\"col\">detail</th></tr></thead><tbody>",
    );
    if history.is_empty() {
        body.push_str("<tr><td colspan=\"9\">No attempt yet.</td></tr>");
    }
    for h in history {
        let latency = h.finished_at.map_or("—".to_owned(), |f| {
            format!("{} ms", (f - h.started_at).num_milliseconds())
        });
        let _ = write!(
            body,
            "<tr class=\"p-{}\"><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(h.phase_name()),
            h.attempt,
            esc(h.phase_name()),
            esc(&h.worker),
            esc(&html::time(h.started_at)),
            esc(&latency),
            h.outcome.map_or("—".to_owned(), |o| esc(o.as_str())),
            h.status_code.map_or("—".to_owned(), |c| c.to_string()),
            h.error_code.map_or("—".to_owned(), |c| esc(c.as_str())),
            esc(&excerpt(h.detail.as_deref().unwrap_or("—"), 300)),
        );
    }
    body.push_str("</tbody></table></section>");
}

/// The audit rows of an intent.
fn audit_table(audit: &[oncebox_store::ops::AuditRow], body: &mut String) {
    body.push_str(
        "<section><h2>Audit</h2><table class=\"audit\"><thead><tr>\
         <th scope=\"col\">when</th><th scope=\"col\">who</th><th scope=\"col\">role</th>\
         <th scope=\"col\">via</th><th scope=\"col\">decision</th><th scope=\"col\">status</th>\
         <th scope=\"col\">reason</th></tr></thead><tbody>",
    );
    if audit.is_empty() {
        body.push_str(
            "<tr><td colspan=\"7\">No operator has decided anything about this intent.</td></tr>",
        );
    }
    for a in audit {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} → {}</td><td>{}</td></tr>",
            esc(&html::time(a.at)),
            esc(&a.actor),
            esc(&a.role),
            esc(&a.via),
            esc(&a.action),
            badge(a.status_before.as_str()),
            badge(a.status_after.as_str()),
            esc(a.reason.as_deref().unwrap_or("—")),
        );
    }
    body.push_str("</tbody></table></section>");
}

/// The forms of the decisions `i`'s status allows an operator, each asking for a reason.
fn decisions(i: &Intent, s: &Session, body: &mut String) {
    let allowed = |to: Status| i.status.operator_transition(to).is_ok();
    let (retry, resolve, cancel) = (
        allowed(Status::Pending),
        allowed(Status::Succeeded) || allowed(Status::Failed),
        allowed(Status::Cancelled),
    );
    if !(retry || resolve || cancel) {
        return;
    }
    let action = |what: &str| format!("{}/{what}", esc(&intent_href(&i.idempotency_key)));
    let csrf = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(&s.csrf)
    );
    let reason = |id: &str| {
        format!(
            "<label for=\"{id}\">Reason</label><textarea id=\"{id}\" name=\"reason\" rows=\"2\" \
             required placeholder=\"What you checked at the receiver, and why\"></textarea>"
        )
    };
    body.push_str("<section class=\"decide\"><h2>Decide</h2><div class=\"cols\">");
    if resolve {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{}\" class=\"card\"><h3>Resolve</h3>{csrf}\
             <fieldset><legend>The effect at the receiver</legend>\
             <label><input type=\"radio\" name=\"outcome\" value=\"succeeded\" required> happened (succeeded)</label>\
             <label><input type=\"radio\" name=\"outcome\" value=\"failed\"> did not and will not happen (failed)</label>\
             </fieldset>\
             <label for=\"reference\">Receiver's reference (if it happened)</label>\
             <input id=\"reference\" name=\"reference\" autocomplete=\"off\">{}\
             <button type=\"submit\">Resolve</button></form>",
            action("resolve"),
            reason("resolve-reason"),
        );
    }
    if retry {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{}\" class=\"card\"><h3>Retry</h3>{csrf}\
             <p class=\"hint\">Sends the same request again under the same key.</p>{}\
             <button type=\"submit\">Retry</button></form>",
            action("retry"),
            reason("retry-reason"),
        );
    }
    if cancel {
        let _ = write!(
            body,
            "<form method=\"post\" action=\"{}\" class=\"card\"><h3>Cancel</h3>{csrf}\
             <p class=\"hint\">Only before any attempt was dispatched.</p>{}\
             <button type=\"submit\">Cancel</button></form>",
            action("cancel"),
            reason("cancel-reason"),
        );
    }
    body.push_str("</div></section>");
}
