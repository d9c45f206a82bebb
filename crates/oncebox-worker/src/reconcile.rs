//! Reconciliation (DESIGN §5 Unknown): an outcome is unknown at a destination that does not
//! honour keys, so the effect is looked up by key instead of re-sent blindly.

use std::time::{Duration, SystemTime};

use oncebox_core::Status;
use oncebox_core::config::LookupSettings;
use oncebox_core::retry::Jitter;
use oncebox_delivery::LookupResult;
use oncebox_store::{Completion, Next, Phase, Report};
use serde_json::{Value, json};

/// A claimed reconciliation.
#[derive(Debug, Clone)]
pub struct Reconciling {
    /// The intent.
    pub intent_id: i64,
    /// The claimed epoch.
    pub epoch: i64,
    /// Delivery attempts made so far (a lookup is not one).
    pub attempt: i32,
    /// When the unknown attempt was dispatched.
    pub dispatched_at: Option<SystemTime>,
    /// How long the lookup took.
    pub elapsed: Duration,
}

/// The delay before looking again: equal jitter over a fifth of the consistency window
/// (at least 100 ms, at most a minute), so that about five lookups fit in the window.
pub fn look_again_in(window: Duration, jitter: &mut impl Jitter) -> Duration {
    let cap = (window / 5).clamp(Duration::from_millis(100), Duration::from_secs(60));
    let f = jitter.fraction();
    let f = if f.is_finite() {
        f.clamp(0.0, 1.0)
    } else {
        0.0
    };
    cap / 2 + (cap / 2).mul_f64(f)
}

/// Decides what a lookup's result means for the intent.
///
/// `lookup` is `None` when the destination has no lookup configured (then a person decides).
#[allow(clippy::too_many_arguments)]
pub fn decide_reconcile(
    r: &Reconciling,
    lookup: Option<(&LookupSettings, &str, &LookupResult)>,
    arguments: &Value,
    window: Duration,
    now: SystemTime,
    jitter: &mut impl Jitter,
) -> Completion {
    let done = |status: Status,
                next: Next,
                outcome: &str,
                detail: String,
                response: Option<Value>,
                reference: Option<String>| {
        Completion {
            intent_id: r.intent_id,
            phase: Phase::Reconcile,
            epoch: r.epoch,
            attempt: r.attempt,
            status,
            response,
            external_reference: reference,
            last_error: (status != Status::Succeeded)
                .then(|| json!({"code": outcome, "detail": detail})),
            next,
            report: Some(Report {
                outcome: outcome.into(),
                status_code: None,
                error_code: None,
                detail: Some(detail),
                elapsed: r.elapsed,
            }),
        }
    };
    let Some((settings, url, result)) = lookup else {
        return done(
            Status::NeedsReview,
            Next::Done,
            "no_lookup",
            "the outcome is unknown and the destination has no lookup: a person must check".into(),
            None,
            None,
        );
    };
    match result {
        LookupResult::Failed {
            transient: true,
            detail,
        } => {
            let delay = look_again_in(window, jitter);
            done(
                Status::Unknown,
                Next::Retry(delay),
                "lookup_failed",
                format!("{detail}; looking again in {delay:?}"),
                None,
                None,
            )
        }
        LookupResult::Failed {
            transient: false,
            detail,
        } => done(
            Status::NeedsReview,
            Next::Done,
            "lookup_failed",
            format!("{detail}; the lookup cannot answer"),
            None,
            None,
        ),
        LookupResult::Found(found) if found.is_empty() => {
            let since = r
                .dispatched_at
                .and_then(|d| now.duration_since(d).ok())
                .unwrap_or(window);
            if since >= window {
                done(
                    Status::Pending,
                    Next::Reissue,
                    "reissue",
                    format!(
                        "GET {url} found nothing {since:?} after dispatch (window {window:?}): re-issued with the same key"
                    ),
                    None,
                    None,
                )
            } else {
                let delay = look_again_in(window, jitter);
                done(
                    Status::Unknown,
                    Next::Retry(delay),
                    "lookup_none",
                    format!(
                        "GET {url} found nothing {since:?} after dispatch; inside the {window:?} window, looking again in {delay:?}"
                    ),
                    None,
                    None,
                )
            }
        }
        LookupResult::Found(found) if found.len() > 1 => done(
            Status::NeedsReview,
            Next::Done,
            "lookup_ambiguous",
            format!("GET {url} found {} effects for one intent", found.len()),
            Some(Value::Array(found.clone())),
            None,
        ),
        LookupResult::Found(found) => {
            let object = &found[0];
            let differing: Vec<&str> = settings
                .fields
                .iter()
                .filter(|p| object.pointer(p) != arguments.pointer(p))
                .map(String::as_str)
                .collect();
            if !differing.is_empty() {
                return done(
                    Status::NeedsReview,
                    Next::Done,
                    "lookup_mismatch",
                    format!(
                        "GET {url} found one effect whose {} differ from the intent",
                        differing.join(", ")
                    ),
                    Some(object.clone()),
                    None,
                );
            }
            let reference =
                settings
                    .reference_pointer
                    .as_deref()
                    .and_then(|p| match object.pointer(p) {
                        Some(Value::String(s)) => Some(s.clone()),
                        Some(Value::Number(n)) => Some(n.to_string()),
                        _ => None,
                    });
            done(
                Status::Succeeded,
                Next::Done,
                "lookup_found",
                format!(
                    "GET {url} found exactly one effect and its {} agree",
                    if settings.fields.is_empty() {
                        "(no) fields".into()
                    } else {
                        settings.fields.join(", ")
                    }
                ),
                Some(object.clone()),
                reference,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LookupSettings {
        LookupSettings {
            url: "http://x/find?key={key}".into(),
            results_pointer: "/data".into(),
            fields: vec!["/amount".into()],
            reference_pointer: Some("/id".into()),
            timeout: Duration::from_secs(5),
        }
    }
    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }
    fn r(dispatched_ago: Duration) -> Reconciling {
        Reconciling {
            intent_id: 7,
            epoch: 2,
            attempt: 1,
            dispatched_at: Some(t0() - dispatched_ago),
            elapsed: Duration::ZERO,
        }
    }
    fn go(found: LookupResult, ago: Duration) -> Completion {
        let s = settings();
        decide_reconcile(
            &r(ago),
            Some((&s, "http://x/find?key=k", &found)),
            &json!({"amount": "10.00"}),
            Duration::from_secs(60),
            t0(),
            &mut || 0.5,
        )
    }

    #[test]
    fn one_agreeing_match_succeeds_with_its_reference() {
        let c = go(
            LookupResult::Found(vec![json!({"id": "inv-1", "amount": "10.00"})]),
            Duration::from_secs(1),
        );
        assert_eq!((c.status, c.next), (Status::Succeeded, Next::Done));
        assert_eq!(c.external_reference.as_deref(), Some("inv-1"));
        assert_eq!(c.phase, Phase::Reconcile);
        assert_eq!(c.report.expect("report").outcome, "lookup_found");
    }

    #[test]
    fn nothing_found_waits_for_the_window_then_reissues() {
        let c = go(LookupResult::Found(vec![]), Duration::from_secs(10));
        assert_eq!(c.status, Status::Unknown);
        assert!(
            matches!(c.next, Next::Retry(d) if d >= Duration::from_secs(6) && d <= Duration::from_secs(12))
        );
        let c = go(LookupResult::Found(vec![]), Duration::from_secs(61));
        assert_eq!((c.status, c.next), (Status::Pending, Next::Reissue));
    }

    #[test]
    fn ambiguity_and_mismatch_need_a_person() {
        let two = go(
            LookupResult::Found(vec![json!({"amount": "10.00"}), json!({"amount": "10.00"})]),
            Duration::from_secs(1),
        );
        assert_eq!((two.status, two.next), (Status::NeedsReview, Next::Done));
        assert_eq!(two.report.expect("report").outcome, "lookup_ambiguous");
        let other = go(
            LookupResult::Found(vec![json!({"amount": "99.00"})]),
            Duration::from_secs(1),
        );
        assert_eq!(other.status, Status::NeedsReview);
        assert!(
            other
                .report
                .expect("report")
                .detail
                .expect("detail")
                .contains("/amount")
        );
    }

    #[test]
    fn failures_retry_or_stop() {
        let c = go(
            LookupResult::Failed {
                transient: true,
                detail: "timeout".into(),
            },
            Duration::from_secs(1),
        );
        assert_eq!(c.status, Status::Unknown);
        assert!(matches!(c.next, Next::Retry(_)));
        let c = go(
            LookupResult::Failed {
                transient: false,
                detail: "HTTP 403".into(),
            },
            Duration::from_secs(1),
        );
        assert_eq!((c.status, c.next), (Status::NeedsReview, Next::Done));
        let none = decide_reconcile(
            &r(Duration::ZERO),
            None,
            &json!({}),
            Duration::from_secs(60),
            t0(),
            &mut || 0.5,
        );
        assert_eq!((none.status, none.next), (Status::NeedsReview, Next::Done));
    }

    #[test]
    fn every_reconcile_decision_is_allowed_from_reconciling() {
        for s in [
            Status::Succeeded,
            Status::Pending,
            Status::NeedsReview,
            Status::Unknown,
        ] {
            assert!(Status::Reconciling.transition(s).is_ok(), "{s}");
        }
    }
}
