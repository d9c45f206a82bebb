//! What several of this crate's test files build alike.

use std::time::Duration;

use oncebox_core::{AttemptError, AttemptKind, ErrorCode, Status};
use oncebox_store::{Completion, Lease, Next, Phase, Report};
use serde_json::json;

/// A plain success of the delivery under `lease`, answered by `who` (its response and reference
/// name it, so a test can tell whose write went through).
pub(crate) fn succeeded(lease: Lease, who: &str) -> Completion {
    Completion {
        lease,
        phase: Phase::Deliver,
        attempt: 1,
        status: Status::Succeeded,
        response: Some(json!({"by": who})),
        external_reference: Some(format!("ref-{who}")),
        last_error: None,
        next: Next::Done,
        report: Some(Report {
            kind: AttemptKind::Succeeded,
            status_code: Some(201),
            error_code: None,
            detail: None,
            elapsed: Duration::from_millis(3),
        }),
    }
}

/// A retry after a refusal that executed nothing, of the delivery under `lease`.
pub(crate) fn retried(lease: Lease) -> Completion {
    Completion {
        lease,
        phase: Phase::Deliver,
        attempt: 1,
        status: Status::Pending,
        response: None,
        external_reference: None,
        last_error: Some(AttemptError::new(ErrorCode::HttpStatus, "503")),
        next: Next::Retry(Duration::from_secs(60)),
        report: Some(Report {
            kind: AttemptKind::RetryBeforeExecution,
            status_code: Some(503),
            error_code: Some(ErrorCode::HttpStatus),
            detail: Some("busy".into()),
            elapsed: Duration::from_millis(3),
        }),
    }
}
