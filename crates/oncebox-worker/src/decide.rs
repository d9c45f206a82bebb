//! From an attempt's outcome to the journal's next status and the outbox row's fate — the
//! worker's only decision point, checked against the core transition table.

use std::time::{Duration, SystemTime};

use oncebox_core::config::IdempotencyMode;
use oncebox_core::outcome::AttemptError;
use oncebox_core::retry::{GiveUpReason, Jitter, RetryDecision};
use oncebox_core::{DeliveryOutcome, RetryPolicy, Status};
use oncebox_store::{Completion, Next, Phase, Report};
use serde_json::json;

/// What the worker knows of a claimed delivery when its attempt ends.
#[derive(Debug, Clone)]
pub struct Attempted {
    /// The intent.
    pub intent_id: i64,
    /// The claimed epoch.
    pub epoch: i64,
    /// This attempt's number (from 1).
    pub attempt: i32,
    /// The intent's deadline.
    pub deadline: Option<SystemTime>,
    /// How long the attempt took.
    pub elapsed: Duration,
}

fn error_json(e: &AttemptError) -> serde_json::Value {
    json!({"code": e.code.as_str(), "detail": e.detail, "status_code": e.status_code})
}

/// Decides the completion of attempt `a` that ended with `outcome`, at `now`.
///
/// - success → `succeeded`;
/// - retry before execution → `pending` again after backoff (Retry-After honoured), or `failed`
///   when attempts are exhausted, `expired` when the deadline forbids another attempt;
/// - permanent → `failed`;
/// - unknown → at a key-honouring destination, re-send with the same key after backoff (status
///   `unknown`), or `needs_review` when no attempt is left; with `lookup`, `unknown` and a
///   reconcile-phase row; with `none`, `needs_review`.
pub fn decide(
    a: &Attempted,
    outcome: &DeliveryOutcome,
    policy: &RetryPolicy,
    mode: IdempotencyMode,
    now: SystemTime,
    jitter: &mut impl Jitter,
) -> Completion {
    let report = |detail: Option<String>| Report {
        outcome: outcome.class().as_str().to_owned(),
        status_code: match outcome {
            DeliveryOutcome::Succeeded { status_code, .. } => *status_code,
            _ => outcome.error().and_then(|e| e.status_code),
        },
        error_code: outcome.error().map(|e| e.code.as_str().to_owned()),
        detail: detail.or_else(|| outcome.error().map(|e| e.detail.clone())),
        elapsed: a.elapsed,
    };
    let made = u32::try_from(a.attempt).unwrap_or(u32::MAX);
    let mut retry =
        |retry_after| policy.next_attempt(made, now, retry_after, a.deadline, &mut *jitter);
    let delay_until = |t: SystemTime| t.duration_since(now).unwrap_or_default();
    let last_error = outcome.error().map(error_json);

    let (status, next, detail, response, reference) = match outcome {
        DeliveryOutcome::Succeeded {
            response,
            external_reference,
            ..
        } => (
            Status::Succeeded,
            Next::Done,
            None,
            response.clone(),
            external_reference.clone(),
        ),
        DeliveryOutcome::RetryBeforeExecution { retry_after, error } => match retry(*retry_after) {
            RetryDecision::RetryAt(t) => (
                Status::Pending,
                Next::Retry(delay_until(t)),
                Some(format!(
                    "{}; not executed, retry in {:?}",
                    error.detail,
                    delay_until(t)
                )),
                None,
                None,
            ),
            RetryDecision::GiveUp(GiveUpReason::AttemptsExhausted) => (
                Status::Failed,
                Next::Done,
                Some(format!("{}; {made} attempts made, none left", error.detail)),
                None,
                None,
            ),
            RetryDecision::GiveUp(GiveUpReason::DeadlineReached) => (
                Status::Expired,
                Next::Done,
                Some(format!(
                    "{}; the deadline allows no further attempt",
                    error.detail
                )),
                None,
                None,
            ),
        },
        DeliveryOutcome::Permanent { .. } => (Status::Failed, Next::Done, None, None, None),
        DeliveryOutcome::Unknown { error } => match mode {
            IdempotencyMode::Key => match retry(None) {
                RetryDecision::RetryAt(t) => (
                    Status::Unknown,
                    Next::Retry(delay_until(t)),
                    Some(format!(
                        "{}; outcome unknown, re-send with the same key in {:?}",
                        error.detail,
                        delay_until(t)
                    )),
                    None,
                    None,
                ),
                RetryDecision::GiveUp(_) => (
                    Status::NeedsReview,
                    Next::Done,
                    Some(format!(
                        "{}; outcome unknown and no attempt left",
                        error.detail
                    )),
                    None,
                    None,
                ),
            },
            IdempotencyMode::Lookup => (
                Status::Unknown,
                Next::Reconcile,
                Some(format!(
                    "{}; outcome unknown, to be looked up",
                    error.detail
                )),
                None,
                None,
            ),
            IdempotencyMode::None => (
                Status::NeedsReview,
                Next::Done,
                Some(format!(
                    "{}; outcome unknown at a destination that neither honours keys nor can be queried",
                    error.detail
                )),
                None,
                None,
            ),
        },
    };
    debug_assert!(legal_from_in_flight(status), "in_flight -> {status}");
    Completion {
        intent_id: a.intent_id,
        phase: Phase::Deliver,
        epoch: a.epoch,
        attempt: a.attempt,
        status,
        response,
        external_reference: reference,
        last_error,
        next,
        report: Some(report(detail)),
    }
}

/// True when `to` is reachable from `in_flight` directly or through `unknown`.
pub(crate) fn legal_from_in_flight(to: Status) -> bool {
    Status::InFlight.transition(to).is_ok()
        || (Status::InFlight.transition(Status::Unknown).is_ok()
            && Status::Unknown.transition(to).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncebox_core::outcome::ErrorCode;
    use oncebox_core::retry::RetryAfter;

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }
    fn attempted(attempt: i32, deadline: Option<SystemTime>) -> Attempted {
        Attempted {
            intent_id: 1,
            epoch: 3,
            attempt,
            deadline,
            elapsed: Duration::from_millis(5),
        }
    }
    fn err(code: ErrorCode) -> AttemptError {
        AttemptError {
            code,
            detail: "d".into(),
            status_code: Some(503),
        }
    }
    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        }
    }
    fn go(a: &Attempted, o: &DeliveryOutcome, mode: IdempotencyMode) -> Completion {
        decide(a, o, &policy(), mode, t0(), &mut || 1.0)
    }

    #[test]
    fn success_is_done() {
        let o = DeliveryOutcome::Succeeded {
            status_code: Some(201),
            external_reference: Some("r".into()),
            response: None,
        };
        let c = go(&attempted(1, None), &o, IdempotencyMode::None);
        assert_eq!((c.status, c.next), (Status::Succeeded, Next::Done));
        assert_eq!(c.external_reference.as_deref(), Some("r"));
        assert_eq!(c.epoch, 3);
    }

    #[test]
    fn retry_before_execution_backs_off_then_fails_or_expires() {
        let busy = DeliveryOutcome::RetryBeforeExecution {
            error: err(ErrorCode::HttpStatus),
            retry_after: Some(RetryAfter::Delay(Duration::from_secs(2))),
        };
        let c = go(&attempted(1, None), &busy, IdempotencyMode::Key);
        assert_eq!(
            (c.status, c.next),
            (Status::Pending, Next::Retry(Duration::from_secs(2)))
        );
        let c = go(&attempted(3, None), &busy, IdempotencyMode::Key);
        assert_eq!((c.status, c.next), (Status::Failed, Next::Done));
        let c = go(
            &attempted(1, Some(t0() + Duration::from_secs(1))),
            &busy,
            IdempotencyMode::Key,
        );
        assert_eq!((c.status, c.next), (Status::Expired, Next::Done));
    }

    #[test]
    fn unknown_depends_on_the_destination() {
        let lost = DeliveryOutcome::Unknown {
            error: err(ErrorCode::Timeout),
        };
        let c = go(&attempted(1, None), &lost, IdempotencyMode::Key);
        assert_eq!(c.status, Status::Unknown);
        assert!(
            matches!(c.next, Next::Retry(_)),
            "re-send with the same key"
        );
        let c = go(&attempted(3, None), &lost, IdempotencyMode::Key);
        assert_eq!((c.status, c.next), (Status::NeedsReview, Next::Done));
        let c = go(&attempted(1, None), &lost, IdempotencyMode::Lookup);
        assert_eq!((c.status, c.next), (Status::Unknown, Next::Reconcile));
        let c = go(&attempted(1, None), &lost, IdempotencyMode::None);
        assert_eq!((c.status, c.next), (Status::NeedsReview, Next::Done));
    }

    #[test]
    fn permanent_fails() {
        let o = DeliveryOutcome::Permanent {
            error: err(ErrorCode::HttpStatus),
        };
        let c = go(&attempted(1, None), &o, IdempotencyMode::Key);
        assert_eq!((c.status, c.next), (Status::Failed, Next::Done));
        assert_eq!(c.last_error.expect("error")["code"], "http_status");
    }

    #[test]
    fn every_decision_is_a_legal_transition() {
        for s in Status::ALL {
            let expected = matches!(
                s,
                Status::Succeeded
                    | Status::Failed
                    | Status::Pending
                    | Status::Unknown
                    | Status::Expired
                    | Status::InFlight
                    | Status::Reconciling
                    | Status::NeedsReview
            );
            assert_eq!(legal_from_in_flight(s), expected, "{s}");
        }
    }
}
