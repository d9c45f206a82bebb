//! What every client of oncebox does the same way, in Rust, Python and TypeScript: how calls
//! are retried and how long they wait ([`ClientDefaults`]), and what a tool call raises for
//! each way an intent can stand when the wait ends ([`Ending`]). The Python and TypeScript
//! packages read these from their native modules instead of writing them again, and the
//! client behaviour fixture (`tests/fixtures/client-behaviour.json`) holds the three clients
//! to them.

use std::time::Duration;

use crate::status::Status;

/// The defaults of the HTTP clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientDefaults {
    /// Tries in all, the first included, for transport failures, 5xx and 429 answers.
    pub attempts: u32,
    /// The first backoff; doubled for each further one, with jitter.
    pub min_delay: Duration,
    /// The longest backoff, and the most a server's `Retry-After` is waited for.
    pub max_delay: Duration,
    /// The per-request timeout; a long-poll adds its wait to it.
    pub timeout: Duration,
    /// The longest single long-poll (`GET /v1/intents/{key}?wait=`) the server allows, in
    /// seconds: a longer wait is made of several.
    pub max_wait_secs: u64,
    /// How long a tool call waits for its intent to settle before it gives up waiting (the
    /// intent goes on by itself).
    pub tool_wait: Duration,
}

/// The clients' defaults.
pub const CLIENT_DEFAULTS: ClientDefaults = ClientDefaults {
    attempts: 6,
    min_delay: Duration::from_millis(100),
    max_delay: Duration::from_secs(5),
    timeout: Duration::from_secs(30),
    max_wait_secs: 60,
    tool_wait: Duration::from_secs(30),
};

/// What a tool call ends in when its intent stands at a status other than `succeeded`: the
/// error it raises (the same class name in Python and TypeScript) and its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    /// The error class: `IntentFailed`, `IntentCancelled`, `NeedsReview`, `AwaitingApproval`,
    /// `Rejected` or `WaitTimeout`.
    pub error: &'static str,
    /// What happened, for a person and a model. `{status}` stands for the status's name.
    pub message: &'static str,
    /// Whether the intent's error detail (`error.detail`), when it has one, follows the
    /// message after `": "`.
    pub with_detail: bool,
}

impl Ending {
    /// The message for an intent at `status` whose error detail is `detail`.
    pub fn message_for(&self, status: Status, detail: Option<&str>) -> String {
        let message = self.message.replace("{status}", status.as_str());
        match detail {
            Some(detail) if self.with_detail && !detail.is_empty() => {
                format!("{message}: {detail}")
            }
            _ => message,
        }
    }
}

/// Every error class a tool call can raise, in the order of [`Status::ALL`]'s endings.
pub const ENDING_ERRORS: [&str; 6] = [
    "AwaitingApproval",
    "WaitTimeout",
    "NeedsReview",
    "IntentFailed",
    "IntentCancelled",
    "Rejected",
];

impl Status {
    /// What a tool call whose intent stands here when its wait ends raises; `None` for
    /// `succeeded`, the one ending that returns the intent.
    pub const fn ending(self) -> Option<Ending> {
        const WAIT_TIMEOUT: Ending = Ending {
            error: "WaitTimeout",
            message: "still {status} when the wait ended; call again later",
            with_detail: false,
        };
        const FAILED: Ending = Ending {
            error: "IntentFailed",
            message: "{status}",
            with_detail: true,
        };
        Some(match self {
            Status::Succeeded => return None,
            Status::Failed | Status::Expired => FAILED,
            Status::Cancelled => Ending {
                error: "IntentCancelled",
                message: "cancelled before it was sent",
                with_detail: false,
            },
            Status::NeedsReview => Ending {
                error: "NeedsReview",
                message: "outcome unknown; a person must decide (oncebox ops show)",
                with_detail: false,
            },
            Status::AwaitingApproval => Ending {
                error: "AwaitingApproval",
                message: "awaits approval by people; nothing was sent (call again later)",
                with_detail: false,
            },
            Status::Rejected => Ending {
                error: "Rejected",
                message: "rejected by a person; it was never sent",
                with_detail: false,
            },
            Status::Pending | Status::InFlight | Status::Unknown | Status::Reconciling => {
                WAIT_TIMEOUT
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_but_success_raises_a_listed_error() {
        let mut seen = Vec::new();
        for status in Status::ALL {
            match status.ending() {
                None => assert_eq!(status, Status::Succeeded),
                Some(e) => {
                    assert!(ENDING_ERRORS.contains(&e.error), "{status}: {}", e.error);
                    if !seen.contains(&e.error) {
                        seen.push(e.error);
                    }
                    // A settled intent's ending is its outcome; an unsettled one's, the wait.
                    assert_eq!(e.error == "WaitTimeout", !status.is_settled(), "{status}");
                }
            }
        }
        assert_eq!(seen, ENDING_ERRORS);
    }

    #[test]
    fn messages_name_the_status_and_carry_the_detail_where_asked() {
        let failed = Status::Failed.ending().expect("an ending");
        assert_eq!(
            failed.message_for(Status::Failed, Some("402 refused")),
            "failed: 402 refused"
        );
        assert_eq!(failed.message_for(Status::Expired, None), "expired");
        let waiting = Status::InFlight.ending().expect("an ending");
        assert_eq!(
            waiting.message_for(Status::InFlight, Some("ignored")),
            "still in_flight when the wait ended; call again later"
        );
    }
}
