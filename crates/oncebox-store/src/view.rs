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
pub struct IntentView<'a> {
    idempotency_key: &'a str,
    action: &'a str,
    status: Status,
    request_hash: &'a str,
    attempt_count: i32,
    external_reference: Option<&'a str>,
    response: Option<&'a Value>,
    error: Option<&'a AttemptError>,
    business_ref: Option<&'a str>,
    run_id: Option<&'a str>,
    step: Option<&'a str>,
    ordering_key: Option<&'a str>,
    deadline: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
}

impl<'a> From<&'a Intent> for IntentView<'a> {
    fn from(i: &'a Intent) -> Self {
        IntentView {
            idempotency_key: &i.idempotency_key,
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
        }
    }
}
