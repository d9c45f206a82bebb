//! "As it will execute": for a person deciding on an intent that awaits approval, the values of
//! the fields its approval policy tests and of every redacted field, as the receiver will get
//! them — the originals, which every other view (the intent page, notices, the API) shows
//! redacted. Asked for with a form (a POST with the session's CSRF token), and each view is a
//! row of the audit log, written before the values are shown.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use maud::html;
use oncebox_store::ops::OpsError;

use super::intent::intent_page;
use super::respond;
use crate::AppState;
use crate::console::html::{Nav, excerpt, intent_href};
use crate::console::{checked_session, internal};

/// `POST /console/intents/{key}/originals`: the fields as they will execute, the view audited.
pub(crate) async fn originals(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> Response {
    let (s, _) = match checked_session(&state, &headers, body).await {
        Ok(checked) => checked,
        Err(answer) => return answer,
    };
    let found = match oncebox_core::validate_key(&key) {
        Err(_) => None,
        Ok(()) => match oncebox_store::intent_by_key(&state.pool, &s.tenant_id, &key).await {
            Ok(found) => found,
            Err(e) => return internal(e),
        },
    };
    let Some(intent) = found else {
        return intent_page(&state, &s, &key, StatusCode::NOT_FOUND, None, None).await;
    };
    let mut tx = match state.pool.begin().await {
        Ok(tx) => tx,
        Err(e) => return internal(e),
    };
    let actor = s.actor("console");
    let arguments = match oncebox_store::approvals::originals(&mut tx, intent.id, &actor).await {
        Ok(arguments) => arguments,
        Err(OpsError::Refused(why) | OpsError::NotFound(why)) => {
            let why = format!("Refused: {why}");
            return intent_page(&state, &s, &key, StatusCode::CONFLICT, None, Some(&why)).await;
        }
        Err(OpsError::Database(e)) => return internal(e),
    };
    if let Err(e) = tx.commit().await {
        return internal(e);
    }
    tracing::info!(principal = %s.principal, tenant = %s.tenant_id, key, "console: originals viewed");
    let fields = state.intake.approver_fields(&intent.action);
    let body = html! {
        p.note role="status" {
            "Your view of these values is recorded in the audit log. Nowhere else are redacted "
            "values shown."
        }
        table.originals {
            thead { tr { th { "field" } th { "as it will execute" } } }
            tbody {
                @for field in &fields {
                    tr {
                        td { code { (field) } }
                        td {
                            @match arguments.pointer(field) {
                                Some(value) => code { (excerpt(&value.to_string(), 2000)) },
                                None => span.hint { "absent" },
                            }
                        }
                    }
                }
                @if fields.is_empty() {
                    tr { td colspan="2" { "The policy tests no field and nothing is redacted." } }
                }
            }
        }
        p { a href=(intent_href(&key)) { "Back to the intent" } }
    };
    let title = format!("As it will execute: {}", excerpt(&key, 60));
    respond(&s, &title, Nav::None, body)
}
