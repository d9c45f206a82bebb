//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663, as rmcp implements it).
//! For a client that declares the extension, a call whose intent has not settled within the
//! tool wait answers with a task instead of a `pending` result. The task's id is the intent's
//! idempotency key (tasks are the caller's tenant's, like keys): `tasks/get` reads the intent —
//! `working` until it settles, then `completed` with the result the call would have returned
//! (an error result for `failed`, `expired` and `needs_review`), or `cancelled`; `tasks/cancel`
//! cancels the intent if it was never dispatched, and says why not otherwise.

use oncebox_core::Status;
use oncebox_store::Intent;
use rmcp::model::{CreateTaskResult, DetailedTask, Task, TaskPayload, TaskStatus};

use crate::result::intent_result;

/// How often a client is asked to poll `tasks/get`, in milliseconds.
const POLL_INTERVAL_MS: u64 = 500;

/// The task of an intent still on its way.
pub(crate) fn created(intent: &Intent) -> CreateTaskResult {
    CreateTaskResult::new(task(intent, TaskStatus::Working))
}

/// The task of `intent` as it stands.
pub(crate) fn detailed(intent: &Intent) -> DetailedTask {
    let payload = match intent.status {
        Status::Cancelled => TaskPayload::Cancelled,
        // Waiting for people is still on its way: the task completes once they decided.
        Status::AwaitingApproval => TaskPayload::Working,
        status if status.is_settled() => {
            let result = serde_json::to_value(intent_result(intent))
                .ok()
                .and_then(|v| v.as_object().cloned())
                .unwrap_or_default();
            TaskPayload::Completed { result }
        }
        _ => TaskPayload::Working,
    };
    DetailedTask::new(task(intent, payload.status()), payload)
}

fn task(intent: &Intent, status: TaskStatus) -> Task {
    let stamp = |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339();
    Task::new(
        intent.idempotency_key.clone(),
        status,
        stamp(intent.created_at),
        stamp(intent.updated_at),
    )
    .with_status_message(format!("the intent is {}", intent.status))
    .with_poll_interval_ms(POLL_INTERVAL_MS)
}
