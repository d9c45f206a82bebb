//! The delivery protocol's decisions that do not depend on I/O, written once and used by the
//! worker and by the protocol's model (`oncebox-model`), so the checked model and the running
//! code decide alike.

use crate::config::IdempotencyMode;
use crate::status::Status;

/// What a worker does with a deliver row it has just claimed (and whose intent is not terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimedRow {
    /// Call the destination; when `mark`, first mark the row dispatched (fenced), so that a
    /// worker that claims it after a crash knows a request may have gone out.
    Send {
        /// Mark the row dispatched before calling.
        mark: bool,
    },
    /// An earlier attempt was dispatched and never recorded, and the destination can be looked
    /// up: the intent becomes `unknown` and goes to reconciliation. No request.
    LookUp,
    /// An earlier attempt was dispatched and never recorded, and nothing can resolve it safely
    /// (a destination that neither honours keys nor can be looked up, or a passed deadline): the
    /// intent goes to a person. No request.
    NeedsReview,
    /// The deadline passed before any attempt was dispatched: the intent expires. No request.
    Expire,
}

/// Decides [`ClaimedRow`] from the row's dispatch mark (`dispatched`: an attempt was marked and
/// never recorded), the destination's idempotency mode and whether the intent's deadline has
/// passed. A destination that honours keys is re-sent with the same key; one that does not is
/// marked before every send, so it is never sent a second request after a mark.
pub fn claimed_row(dispatched: bool, mode: IdempotencyMode, deadline_passed: bool) -> ClaimedRow {
    match (dispatched, mode, deadline_passed) {
        (true, IdempotencyMode::Lookup, _) => ClaimedRow::LookUp,
        (true, IdempotencyMode::None, _) | (true, IdempotencyMode::Key, true) => {
            ClaimedRow::NeedsReview
        }
        (false, _, true) => ClaimedRow::Expire,
        (prior_unknown, mode, _) => ClaimedRow::Send {
            mark: !mode.honours_keys() && !prior_unknown,
        },
    }
}

/// What follows an attempt whose outcome is unknown (the request may have executed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AfterUnknown {
    /// Send again with the same key, later (the destination honours keys and the retry budget
    /// allows another attempt). The intent is `unknown` until then.
    Resend,
    /// Look the effect up (reconciliation). The intent is `unknown`.
    LookUp,
    /// Nothing can resolve it safely: a person decides (`needs_review`).
    NeedsReview,
}

/// Decides [`AfterUnknown`] from the destination's idempotency mode and whether the retry
/// policy allows another attempt (`retry_left`). Never a blind re-send: only a destination that
/// honours keys is sent the request again.
pub fn after_unknown(mode: IdempotencyMode, retry_left: bool) -> AfterUnknown {
    match mode {
        IdempotencyMode::Key if retry_left => AfterUnknown::Resend,
        IdempotencyMode::Key => AfterUnknown::NeedsReview,
        IdempotencyMode::Lookup => AfterUnknown::LookUp,
        IdempotencyMode::None => AfterUnknown::NeedsReview,
    }
}

/// Whether recording an attempt may move an `in_flight` intent to `to`: a transition of the
/// table, directly or through `unknown` (an unknown outcome handed to a person in the same
/// write: `in_flight` → `unknown` → `needs_review`).
pub fn record_allowed(to: Status) -> bool {
    Status::InFlight.transition(to).is_ok()
        || (Status::InFlight.transition(Status::Unknown).is_ok()
            && Status::Unknown.transition(to).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_row_is_never_sent_again_unless_its_destination_honours_keys() {
        for mode in [
            IdempotencyMode::Key,
            IdempotencyMode::Lookup,
            IdempotencyMode::None,
        ] {
            for deadline_passed in [false, true] {
                let decided = claimed_row(true, mode, deadline_passed);
                let sends = matches!(decided, ClaimedRow::Send { .. });
                assert_eq!(
                    sends,
                    mode.honours_keys() && !deadline_passed,
                    "{mode:?} {deadline_passed}"
                );
                assert_eq!(
                    claimed_row(false, mode, false),
                    ClaimedRow::Send {
                        mark: !mode.honours_keys()
                    }
                );
            }
        }
    }
}
