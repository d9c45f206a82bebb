//! The public view of an intent, shared by every JSON surface.

use chrono::{DateTime, Utc};
use oncebox_core::{AttemptError, Status};
use serde::Serialize;
use serde_json::Value;

use crate::Intent;

/// The public view of an intent: what its owner may read (no internal ids of other systems
/// beyond the receiver's reference). The one shape an intent has in JSON: the API's answers,
/// the ops API's and the MCP gateway's tool results serialize it.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Intent))]
pub struct IntentView<'a> {
    /// The key the intent was submitted under.
    idempotency_key: &'a str,
    /// What every destination sees as the intent's identity (`Idempotency-Key`, `webhook-id`,
    /// AMQP `message_id`, MCP `_meta`, `{key}` in lookups): unique across tenants, fixed
    /// when the intent was written.
    delivery_key: String,
    /// The configured action.
    action: &'a str,
    /// Where it stands.
    status: Status,
    /// SHA-256 of the canonical request: a replay under the same key must match it.
    request_hash: &'a str,
    /// Calls made so far.
    attempt_count: i32,
    /// The receiver's reference of the effect, once known.
    external_reference: Option<&'a str>,
    /// The receiver's answer, as JSON, once it succeeded.
    response: Option<&'a Value>,
    /// What went wrong last, when something did.
    error: Option<&'a AttemptError>,
    /// The caller's reference for the business object.
    business_ref: Option<&'a str>,
    /// The agent run that asked.
    run_id: Option<&'a str>,
    /// The step of that run.
    step: Option<&'a str>,
    /// The ordering lane, when the intent is in one.
    ordering_key: Option<&'a str>,
    /// After this instant it is not delivered.
    deadline: Option<DateTime<Utc>>,
    /// When it was accepted.
    created_at: DateTime<Utc>,
    /// When it last changed.
    updated_at: DateTime<Utc>,
    /// When it became terminal.
    completed_at: Option<DateTime<Utc>>,
    /// Who submitted it: a principal (`user:NAME`, `oidc:ISSUER#SUBJECT`, `token:ID` or
    /// `db:ROLE`); null for intents written before submitters were recorded.
    submitted_by: Option<&'a str>,
}

impl<'a> From<&'a Intent> for IntentView<'a> {
    fn from(i: &'a Intent) -> Self {
        IntentView {
            idempotency_key: &i.idempotency_key,
            delivery_key: i.delivery_key(),
            action: &i.action,
            status: i.status,
            request_hash: &i.request_hash,
            attempt_count: i.attempt_count,
            external_reference: i.external_reference.as_deref(),
            response: i.response.as_ref(),
            error: i.last_error.as_ref(),
            business_ref: i.business_ref.as_deref(),
            run_id: i.run_id.as_deref(),
            step: i.step.as_deref(),
            ordering_key: i.ordering_key.as_deref(),
            deadline: i.deadline,
            created_at: i.created_at,
            updated_at: i.updated_at,
            completed_at: i.completed_at,
            submitted_by: i.submitted_by.as_deref(),
        }
    }
}
