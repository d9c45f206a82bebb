//! Reconciliation decisions (docs/architecture.md, "Unknown outcomes"): an outcome is unknown at
//! a destination that does not honour keys, so the effect is looked up by key instead of re-sent
//! blindly. Pure: time and jitter are passed in.

use std::time::{Duration, SystemTime};

use oncebox_core::config::LookupSettings;
use oncebox_core::protocol::{self, AfterLookup, LookupSeen};
use oncebox_core::retry::Jitter;
use oncebox_core::{AttemptError, AttemptKind, Status};
use oncebox_delivery::LookupResult;
use oncebox_store::{Completion, Lease, Next, Phase, Report};
use serde_json::Value;

/// A claimed reconciliation.
#[derive(Debug, Clone)]
pub struct Reconciling {
    /// The intent and the claimed epoch.
    pub lease: Lease,
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
/// `lookup` is `None` when the destination has no lookup configured (then a person decides);
/// otherwise its settings, the URL looked up (as errors show it) and what it found. Only the one
/// object that matched is kept as the intent's response: when several were found, or the one
/// found does not agree, none of them is (they may be another intent's, or another tenant's).
pub fn decide_reconcile(
    r: &Reconciling,
    lookup: Option<(&LookupSettings, &str, &LookupResult)>,
    arguments: &Value,
    window: Duration,
    now: SystemTime,
    jitter: &mut impl Jitter,
) -> Completion {
    let Some((settings, url, result)) = lookup else {
        return Decision::new(
            Status::NeedsReview,
            Next::Done,
            AttemptKind::NoLookup,
            "the outcome is unknown and the destination has no lookup: a person must check".into(),
        )
        .complete(r);
    };
    let since = r
        .dispatched_at
        .and_then(|d| now.duration_since(d).ok())
        .unwrap_or(window);
    let seen = lookup_seen(settings, result, arguments);
    let after = protocol::after_lookup(seen, since >= window);
    let status = after.status();
    let decision = match (after, result) {
        (AfterLookup::LookAgain, LookupResult::Failed { detail, .. }) => {
            let delay = look_again_in(window, jitter);
            Decision::new(
                status,
                Next::Retry(delay),
                AttemptKind::LookupFailed,
                format!("{detail}; looking again in {delay:?}"),
            )
        }
        (_, LookupResult::Failed { detail, .. }) => Decision::new(
            status,
            Next::Done,
            AttemptKind::LookupFailed,
            format!("{detail}; the lookup cannot answer"),
        ),
        (AfterLookup::Reissue, _) => Decision::new(
            status,
            Next::Reissue,
            AttemptKind::Reissue,
            format!(
                "GET {url} found nothing {since:?} after dispatch (window {window:?}): re-issued with the same key"
            ),
        ),
        (AfterLookup::LookAgain, LookupResult::Found(_)) => {
            let delay = look_again_in(window, jitter);
            Decision::new(
                status,
                Next::Retry(delay),
                AttemptKind::LookupNone,
                format!(
                    "GET {url} found nothing {since:?} after dispatch; inside the {window:?} window, looking again in {delay:?}"
                ),
            )
        }
        (AfterLookup::NeedsReview, LookupResult::Found(found)) if seen == LookupSeen::Several => {
            Decision::new(
                status,
                Next::Done,
                AttemptKind::LookupAmbiguous,
                format!("GET {url} found {} effects for one intent", found.len()),
            )
        }
        (AfterLookup::NeedsReview, LookupResult::Found(found)) => Decision::new(
            status,
            Next::Done,
            AttemptKind::LookupMismatch,
            format!(
                "GET {url} found one effect whose {} differ from the intent",
                differing(settings, &found[0], arguments).join(", ")
            ),
        ),
        (AfterLookup::Succeeded, LookupResult::Found(found)) => one_found(settings, url, &found[0]),
    };
    decision.complete(r)
}

/// What the lookup saw, in the protocol's terms.
fn lookup_seen(settings: &LookupSettings, result: &LookupResult, arguments: &Value) -> LookupSeen {
    match result {
        LookupResult::Failed {
            transient: true, ..
        } => LookupSeen::FailedTransient,
        LookupResult::Failed { .. } => LookupSeen::FailedPermanent,
        LookupResult::Found(found) if found.is_empty() => LookupSeen::Nothing,
        LookupResult::Found(found) if found.len() > 1 => LookupSeen::Several,
        LookupResult::Found(found) if differing(settings, &found[0], arguments).is_empty() => {
            LookupSeen::OneAgreeing
        }
        LookupResult::Found(_) => LookupSeen::OneDiffering,
    }
}

/// What a reconciliation decided, before it becomes a completion.
struct Decision {
    status: Status,
    next: Next,
    kind: AttemptKind,
    detail: String,
    response: Option<Value>,
    reference: Option<String>,
}

impl Decision {
    fn new(status: Status, next: Next, kind: AttemptKind, detail: String) -> Decision {
        Decision {
            status,
            next,
            kind,
            detail,
            response: None,
            reference: None,
        }
    }

    /// The completion of reconciliation `r`: every decision but success leaves its kind as the
    /// intent's last error.
    fn complete(self, r: &Reconciling) -> Completion {
        let last_error = (self.status != Status::Succeeded)
            .then(|| self.kind.error_code())
            .flatten()
            .map(|code| AttemptError::new(code, self.detail.clone()));
        Completion {
            lease: r.lease,
            phase: Phase::Reconcile,
            attempt: r.attempt,
            status: self.status,
            response: self.response,
            external_reference: self.reference,
            last_error,
            next: self.next,
            report: Some(Report {
                kind: self.kind,
                status_code: None,
                error_code: None,
                detail: Some(self.detail),
                elapsed: r.elapsed,
            }),
        }
    }
}

/// The configured fields (JSON pointers) on which `object` differs from the intent's arguments.
fn differing<'a>(settings: &'a LookupSettings, object: &Value, arguments: &Value) -> Vec<&'a str> {
    settings
        .fields
        .iter()
        .map(|p| p.as_str())
        .filter(|p| object.pointer(p) != arguments.pointer(p))
        .collect()
}

/// Exactly one effect found and its configured fields agree with the intent's arguments: it
/// succeeded, with that object as its response.
fn one_found(settings: &LookupSettings, url: &str, object: &Value) -> Decision {
    let reference =
        settings
            .reference_pointer
            .as_ref()
            .and_then(|p| match object.pointer(p.as_str()) {
                Some(Value::String(s)) => Some(s.clone()),
                Some(Value::Number(n)) => Some(n.to_string()),
                _ => None,
            });
    let fields: Vec<&str> = settings.fields.iter().map(|f| f.as_str()).collect();
    Decision {
        response: Some(object.clone()),
        reference,
        ..Decision::new(
            AfterLookup::Succeeded.status(),
            Next::Done,
            AttemptKind::LookupFound,
            format!(
                "GET {url} found exactly one effect and its {} agree",
                if fields.is_empty() {
                    "(no) fields".to_owned()
                } else {
                    fields.join(", ")
                }
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncebox_core::config::{HttpUrl, JsonPointer};
    use oncebox_core::duration::NonZeroDuration;
    use serde_json::json;

    fn settings() -> LookupSettings {
        let p = |s: &str| JsonPointer::parse(s.to_owned()).expect("pointer");
        LookupSettings {
            url: HttpUrl::parse("http://x/find?key={key}".into()).expect("url"),
            results_pointer: p("/data"),
            fields: vec![p("/amount")],
            reference_pointer: Some(p("/id")),
            timeout: NonZeroDuration::from_secs(5),
            headers: None,
        }
    }
    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }
    fn r(dispatched_ago: Duration) -> Reconciling {
        Reconciling {
            lease: Lease {
                intent_id: 7,
                epoch: 2,
            },
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
        assert_eq!(c.report.expect("report").kind, AttemptKind::LookupFound);
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
        assert_eq!(
            two.report.expect("report").kind,
            AttemptKind::LookupAmbiguous
        );
        assert_eq!(two.response, None, "none of the objects found is kept");
        let other = go(
            LookupResult::Found(vec![json!({"amount": "99.00", "email": "a@example.com"})]),
            Duration::from_secs(1),
        );
        assert_eq!(other.status, Status::NeedsReview);
        assert_eq!(
            other.response, None,
            "an object that does not agree is not kept"
        );
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

    /// Every kind of lookup result, inside and past the window, with and without a lookup:
    /// `decide_reconcile` only asks for what the table allows from `reconciling`.
    #[test]
    fn every_reconcile_decision_is_allowed_from_reconciling() {
        let results = [
            LookupResult::Found(vec![]),
            LookupResult::Found(vec![json!({"id": "x", "amount": "10.00"})]),
            LookupResult::Found(vec![json!({"amount": "99.00"})]),
            LookupResult::Found(vec![json!({}), json!({})]),
            LookupResult::Failed {
                transient: true,
                detail: "t".into(),
            },
            LookupResult::Failed {
                transient: false,
                detail: "p".into(),
            },
        ];
        let mut decided = Vec::new();
        for result in results {
            for ago in [Duration::from_secs(1), Duration::from_secs(61)] {
                decided.push(go(result.clone(), ago));
            }
        }
        decided.push(decide_reconcile(
            &r(Duration::ZERO),
            None,
            &json!({}),
            Duration::from_secs(60),
            t0(),
            &mut || 0.5,
        ));
        for c in &decided {
            assert!(
                Status::Reconciling.transition(c.status).is_ok(),
                "reconciling -> {}",
                c.status
            );
            assert_eq!(
                c.last_error.is_some(),
                c.status != Status::Succeeded,
                "{c:?}"
            );
        }
        let statuses: std::collections::BTreeSet<Status> =
            decided.iter().map(|c| c.status).collect();
        assert_eq!(
            statuses.into_iter().collect::<Vec<_>>(),
            [
                Status::Pending,
                Status::Unknown,
                Status::NeedsReview,
                Status::Succeeded
            ]
        );
    }
}
