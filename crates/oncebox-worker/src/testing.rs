//! What the worker's unit tests share.

use oncebox_core::Status;
use oncebox_store::{ClaimedRow, Lease, Phase};
use sqlx::types::Json;

/// A claimed deliver row of tenant `t`'s intent `key` (action `refund`) in `status`, as a claim
/// returns it: first attempt, lease just taken, no deadline.
pub(crate) fn claimed_row(key: &str, status: Status) -> ClaimedRow {
    let now = chrono::Utc::now();
    ClaimedRow {
        lease: Lease {
            intent_id: 7,
            epoch: 2,
        },
        phase: Phase::Deliver,
        attempt: 0,
        budget_from: 0,
        dispatched_at: None,
        arguments: None,
        lease_expires_at: now,
        lease_taken_over: false,
        tenant_id: "t".into(),
        idempotency_key: key.into(),
        key_form: oncebox_core::KeyForm::CURRENT,
        action: "refund".into(),
        request_hash: "h".into(),
        payload: Json(serde_json::json!({})),
        status,
        external_reference: None,
        last_error: None,
        attempt_count: 0,
        created_at: now,
        updated_at: now,
        deadline: None,
        deadline_passed: false,
        approval_secs_left: None,
    }
}
