//! From an attempt's outcome to the journal's next status and the outbox row's fate — the
//! worker's only decision point, checked against the core transition table.

use std::time::{Duration, SystemTime};

use oncebox_core::config::IdempotencyMode;
use oncebox_core::protocol::AfterUnknown;
use oncebox_core::retry::{GiveUpReason, Jitter, RetryDecision};
use oncebox_core::{DeliveryOutcome, RetryPolicy, Status};
use oncebox_store::{Completion, Lease, Next, Phase, Report};

/// What the worker knows of a claimed delivery when its attempt ends.
#[derive(Debug, Clone)]
pub struct Attempted {
    /// The intent and the claimed epoch.
    pub lease: Lease,
    /// This attempt's number (from 1; numbers only grow for the life of the intent).
    pub attempt: i32,
    /// The attempt count when an operator last retried the intent (0 until then): the retry
    /// policy's budget counts only the attempts after it.
    pub budget_from: i32,
    /// The intent's deadline.
    pub deadline: Option<SystemTime>,
    /// How long the attempt took.
    pub elapsed: Duration,
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
    // Attempts made within the current budget (all of them, until an operator retries).
    let made = u32::try_from(a.attempt - a.budget_from).unwrap_or(u32::MAX);
    let mut retry =
        |retry_after| match policy.next_attempt(made, now, retry_after, a.deadline, &mut *jitter) {
            RetryDecision::RetryAt(t) => Ok(t.duration_since(now).unwrap_or_default()),
            RetryDecision::GiveUp(why) => Err(why),
        };
    let (status, next, detail) = match outcome {
        DeliveryOutcome::Succeeded { .. } => (Status::Succeeded, Next::Done, None),
        DeliveryOutcome::RetryBeforeExecution { retry_after, error } => {
            let made = if a.budget_from > 0 {
                format!("{made} attempts made since the operator's retry")
            } else {
                format!("{made} attempts made")
            };
            not_executed(&error.detail, &made, retry(*retry_after))
        }
        DeliveryOutcome::Permanent { .. } => (Status::Failed, Next::Done, None),
        DeliveryOutcome::Unknown { error } => {
            let delay = retry(None);
            match oncebox_core::protocol::after_unknown(mode, delay.is_ok()) {
                // Resend, or (with no attempt left) a person, said as such.
                AfterUnknown::Resend => resend(&error.detail, delay),
                AfterUnknown::NeedsReview if mode.honours_keys() => resend(&error.detail, delay),
                AfterUnknown::LookUp => (
                    Status::Unknown,
                    Next::Reconcile,
                    Some(format!(
                        "{}; outcome unknown, to be looked up",
                        error.detail
                    )),
                ),
                AfterUnknown::NeedsReview => (
                    Status::NeedsReview,
                    Next::Done,
                    Some(format!(
                        "{}; outcome unknown at a destination that neither honours keys nor can be queried",
                        error.detail
                    )),
                ),
            }
        }
    };
    debug_assert!(legal_from_in_flight(status), "in_flight -> {status}");
    let (response, external_reference) = match outcome {
        DeliveryOutcome::Succeeded {
            response,
            external_reference,
            ..
        } => (response.clone(), external_reference.clone()),
        _ => (None, None),
    };
    Completion {
        lease: a.lease,
        phase: Phase::Deliver,
        attempt: a.attempt,
        status,
        response,
        external_reference,
        last_error: outcome.error().cloned(),
        next,
        report: Some(report(a, outcome, detail)),
    }
}

/// What a decision sets: the status, the row's fate, and the detail for the report.
type Decided = (Status, Next, Option<String>);

/// The request definitely did not execute: retry after `delay`, or give up.
fn not_executed(detail: &str, made: &str, delay: Result<Duration, GiveUpReason>) -> Decided {
    match delay {
        Ok(d) => (
            Status::Pending,
            Next::Retry(d),
            Some(format!("{detail}; not executed, retry in {d:?}")),
        ),
        Err(GiveUpReason::AttemptsExhausted) => (
            Status::Failed,
            Next::Done,
            Some(format!("{detail}; {made}, none left")),
        ),
        Err(GiveUpReason::DeadlineReached) => (
            Status::Expired,
            Next::Done,
            Some(format!("{detail}; the deadline allows no further attempt")),
        ),
    }
}

/// The outcome is unknown at a key-honouring destination: re-send with the same key after
/// `delay`, or hand it to a person when no attempt is left.
fn resend(detail: &str, delay: Result<Duration, GiveUpReason>) -> Decided {
    match delay {
        Ok(d) => (
            Status::Unknown,
            Next::Retry(d),
            Some(format!(
                "{detail}; outcome unknown, re-send with the same key in {d:?}"
            )),
        ),
        Err(_) => (
            Status::NeedsReview,
            Next::Done,
            Some(format!("{detail}; outcome unknown and no attempt left")),
        ),
    }
}

/// The retry-report row of attempt `a`.
fn report(a: &Attempted, outcome: &DeliveryOutcome, detail: Option<String>) -> Report {
    Report {
        kind: outcome.class().kind(),
        status_code: match outcome {
            DeliveryOutcome::Succeeded { status_code, .. } => *status_code,
            _ => outcome.error().and_then(|e| e.status_code),
        },
        error_code: outcome.error().map(|e| e.code),
        detail: detail.or_else(|| outcome.error().map(|e| e.detail.clone())),
        elapsed: a.elapsed,
    }
}

/// True when `to` is reachable from `in_flight` directly or through `unknown` (an unknown
/// outcome that is re-sent or handed to a person in the same step).
pub(crate) fn legal_from_in_flight(to: Status) -> bool {
    oncebox_core::protocol::record_allowed(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncebox_core::outcome::{AttemptError, ErrorCode};
    use oncebox_core::retry::RetryAfter;

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }
    fn attempted(attempt: i32, deadline: Option<SystemTime>) -> Attempted {
        Attempted {
            lease: Lease {
                intent_id: 1,
                epoch: 3,
            },
            attempt,
            budget_from: 0,
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
        assert_eq!(c.lease.epoch, 3);
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

    /// After an operator's retry at 3 attempts, attempt numbers go on (4, 5, 6) and the budget
    /// of 3 counts from there: attempt 5 is retried, attempt 6 is the last.
    #[test]
    fn an_operator_retry_gives_a_fresh_budget_not_fresh_numbers() {
        let busy = DeliveryOutcome::RetryBeforeExecution {
            error: err(ErrorCode::HttpStatus),
            retry_after: None,
        };
        let after_retry = |attempt| Attempted {
            budget_from: 3,
            ..attempted(attempt, None)
        };
        let c = go(&after_retry(5), &busy, IdempotencyMode::Key);
        assert_eq!((c.status, c.attempt), (Status::Pending, 5));
        let c = go(&after_retry(6), &busy, IdempotencyMode::Key);
        assert_eq!((c.status, c.attempt), (Status::Failed, 6));
        assert!(
            c.report
                .and_then(|r| r.detail)
                .is_some_and(|d| d.contains("3 attempts made")),
            "the budget's count, not the life's"
        );
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
        assert_eq!(c.last_error.expect("error").code, ErrorCode::HttpStatus);
    }

    /// Every outcome class, at every destination mode, on a first and a last attempt, with and
    /// without a deadline that forbids another: `decide` only ever asks for a status the
    /// transition table allows from `in_flight` (directly, or through `unknown`), and reports
    /// the attempt under the outcome's own kind.
    #[test]
    fn every_decision_is_a_legal_transition() {
        let outcomes = [
            DeliveryOutcome::Succeeded {
                status_code: Some(200),
                external_reference: None,
                response: None,
            },
            DeliveryOutcome::RetryBeforeExecution {
                error: err(ErrorCode::ConnectRefused),
                retry_after: Some(RetryAfter::Delay(Duration::from_secs(5))),
            },
            DeliveryOutcome::Permanent {
                error: err(ErrorCode::HttpStatus),
            },
            DeliveryOutcome::Unknown {
                error: err(ErrorCode::Timeout),
            },
        ];
        let modes = [
            IdempotencyMode::Key,
            IdempotencyMode::Lookup,
            IdempotencyMode::None,
        ];
        let deadlines = [None, Some(t0() + Duration::from_millis(1))];
        let mut seen = std::collections::BTreeSet::new();
        for o in &outcomes {
            for mode in modes {
                for attempt in [1, 3] {
                    for deadline in deadlines {
                        let c = go(&attempted(attempt, deadline), o, mode);
                        assert!(
                            legal_from_in_flight(c.status),
                            "{o:?} at {mode:?}, attempt {attempt}: in_flight -> {}",
                            c.status
                        );
                        assert_eq!(c.report.as_ref().map(|r| r.kind), Some(o.class().kind()));
                        seen.insert(c.status);
                    }
                }
            }
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            [
                Status::Pending,
                Status::Unknown,
                Status::NeedsReview,
                Status::Succeeded,
                Status::Failed,
                Status::Expired
            ],
            "every reachable decision was exercised"
        );
        for s in Status::ALL {
            let direct_or_through_unknown =
                Status::InFlight.transition(s).is_ok() || Status::Unknown.transition(s).is_ok();
            assert_eq!(legal_from_in_flight(s), direct_or_through_unknown, "{s}");
        }
    }
}
