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

/// What a lookup at the destination saw for an intent whose outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LookupSeen {
    /// The lookup failed and may succeed later (a timeout, a 5xx, a 429).
    FailedTransient,
    /// The lookup failed and cannot answer (a 4xx, an unreadable body).
    FailedPermanent,
    /// No effect carries the intent's key.
    Nothing,
    /// Exactly one effect, whose configured fields agree with the intent's arguments.
    OneAgreeing,
    /// Exactly one effect, whose configured fields differ from the intent's arguments.
    OneDiffering,
    /// More than one effect for one key.
    Several,
}

/// What follows a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AfterLookup {
    /// The effect happened once, as asked: the intent succeeded.
    Succeeded,
    /// Look again later; the intent stays `unknown`.
    LookAgain,
    /// Nothing happened at the destination after its consistency window: deliver again with the
    /// same key (the intent is `pending` again).
    Reissue,
    /// The lookup cannot settle it safely: a person decides (`needs_review`).
    NeedsReview,
}

impl AfterLookup {
    /// The intent's status after the lookup is recorded.
    pub fn status(self) -> Status {
        match self {
            AfterLookup::Succeeded => Status::Succeeded,
            AfterLookup::LookAgain => Status::Unknown,
            AfterLookup::Reissue => Status::Pending,
            AfterLookup::NeedsReview => Status::NeedsReview,
        }
    }
}

/// Decides [`AfterLookup`] from what the lookup saw and whether the destination's consistency
/// window has passed since the unknown attempt was dispatched (`window_passed`). Nothing found is
/// trusted only past the window: inside it, an effect may exist and not be visible yet, so a
/// second request is never sent on an early "nothing".
pub fn after_lookup(seen: LookupSeen, window_passed: bool) -> AfterLookup {
    match seen {
        LookupSeen::FailedTransient => AfterLookup::LookAgain,
        LookupSeen::Nothing if window_passed => AfterLookup::Reissue,
        LookupSeen::Nothing => AfterLookup::LookAgain,
        LookupSeen::OneAgreeing => AfterLookup::Succeeded,
        LookupSeen::FailedPermanent | LookupSeen::OneDiffering | LookupSeen::Several => {
            AfterLookup::NeedsReview
        }
    }
}

/// Whether an ordering lane's head entering `status` releases its lane to the next intent: it
/// succeeded, was cancelled or rejected, or it ended failed, expired or needs_review on a lane that skips
/// failures (`skip_failed`). Any other head holds its lane until an operator decides. The
/// database's `oncebox.lane_advance` applies the same rule (a test holds the two equal).
pub fn releases_lane(status: Status, skip_failed: bool) -> bool {
    matches!(
        status,
        Status::Succeeded | Status::Cancelled | Status::Rejected
    ) || (skip_failed && status.is_dead_letter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_found_is_trusted_only_past_the_window() {
        assert_eq!(
            after_lookup(LookupSeen::Nothing, false),
            AfterLookup::LookAgain
        );
        assert_eq!(
            after_lookup(LookupSeen::Nothing, true),
            AfterLookup::Reissue
        );
        for window_passed in [false, true] {
            assert_eq!(
                after_lookup(LookupSeen::OneAgreeing, window_passed).status(),
                Status::Succeeded
            );
            assert_eq!(
                after_lookup(LookupSeen::Several, window_passed).status(),
                Status::NeedsReview
            );
        }
    }

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
