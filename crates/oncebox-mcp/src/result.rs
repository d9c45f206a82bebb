//! What a tool call returns: the intent as `structuredContent` (the API's view of it: status,
//! key, the receiver's reference and answer…, with a note for the model), an error result for
//! every ending that is not a success, and refusals that name the field.

use oncebox_core::Status;
use oncebox_store::{Intent, IntentView};
use rmcp::model::CallToolResult;
use serde::Serialize;
use serde_json::json;

/// A tool call's `structuredContent`: the intent as every JSON surface shows it, and what its
/// status means for the model when it did not succeed.
#[derive(Serialize)]
struct ToolResult<'a> {
    #[serde(flatten)]
    intent: IntentView<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
}

/// The result of a call whose intent is `intent`: a success when it succeeded or is still on
/// its way (status `pending` and friends, with the key to follow it by), an error result that
/// says how it ended otherwise — never a success for `failed`, `needs_review`, `cancelled`,
/// `expired` or `rejected`. An intent awaiting approval is no error and no success: its note
/// says that people must approve it before anything is sent, and gives the key to follow it by.
pub fn intent_result(intent: &Intent) -> CallToolResult {
    let note = match intent.status {
        Status::Succeeded => None,
        Status::Failed => Some("failed for good: it was not carried out"),
        Status::Expired => Some("expired before it could be carried out"),
        Status::Cancelled => Some("cancelled before it was sent: it was not carried out"),
        Status::NeedsReview => Some(
            "its outcome is unknown and a person must decide; do not act again until they have",
        ),
        Status::AwaitingApproval => Some(
            "awaits approval by people: nothing has been sent yet; tell the user, and call \
             get_intent with this idempotency_key later to follow it (do not call this tool again)",
        ),
        Status::Rejected => Some("rejected by a person: it was not and will not be carried out"),
        _ => Some("still on its way: call get_intent with this idempotency_key to follow it"),
    };
    let body = json!(ToolResult {
        intent: IntentView::from(intent),
        note,
    });
    let ended_badly = matches!(
        intent.status,
        Status::Failed
            | Status::Expired
            | Status::Cancelled
            | Status::NeedsReview
            | Status::Rejected
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
