//! What a tool call returns: the intent's outcome as `structuredContent` (status, key, the
//! receiver's reference and answer), an error result for every ending that is not a success,
//! and refusals that name the field.

use oncebox_core::Status;
use oncebox_store::Intent;
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

/// The result of a call whose intent is `intent`: a success when it succeeded or is still on
/// its way (status `pending` and friends, with the key to follow it by), an error result that
/// says how it ended otherwise — never a success for `failed`, `needs_review`, `cancelled` or
/// `expired`.
pub fn intent_result(intent: &Intent) -> CallToolResult {
    let mut body = json!({
        "status": intent.status,
        "idempotency_key": intent.idempotency_key,
        "external_reference": intent.external_reference,
        "response": intent.response,
        "error": intent.last_error,
        "attempt_count": intent.attempt_count,
    });
    let note = match intent.status {
        Status::Succeeded => None,
        Status::Failed => Some("failed for good: it was not carried out"),
        Status::Expired => Some("expired before it could be carried out"),
        Status::Cancelled => Some("cancelled before it was sent: it was not carried out"),
        Status::NeedsReview => Some(
            "its outcome is unknown and a person must decide; do not act again until they have",
        ),
        _ => Some("still on its way: call get_intent with this idempotency_key to follow it"),
    };
    if let (Some(note), Some(obj)) = (note, body.as_object_mut()) {
        obj.insert("note".into(), Value::String(note.into()));
    }
    let ended_badly = matches!(
        intent.status,
        Status::Failed | Status::Expired | Status::Cancelled | Status::NeedsReview
    );
    if ended_badly {
        CallToolResult::structured_error(body)
    } else {
        CallToolResult::structured(body)
    }
}

/// A call refused before or instead of an intent: `kind` (`invalid`, `conflict`,
/// `not_found`), the field at fault and why — an error result the model can read.
pub fn refusal(kind: &str, field: &str, detail: &str) -> CallToolResult {
    CallToolResult::structured_error(json!({
        "status": "refused",
        "error": kind,
        "field": field,
        "detail": detail,
    }))
}
