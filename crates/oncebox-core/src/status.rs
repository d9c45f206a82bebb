//! Journal statuses and the only allowed transitions between them (docs/architecture.md,
//! "The life of an intent").
//!
//! [`TRANSITIONS`] is the single table every writer consults, operators included. The database
//! stores a status as the enum type `oncebox.intent_status`, whose labels equal [`Status::ALL`],
//! and decides the terminal, settled and dead-letter sets with the SQL functions
//! `oncebox.is_terminal`, `oncebox.is_settled` and `oncebox.is_dead_letter`, which a test holds
//! equal to [`Status::is_terminal`], [`Status::is_settled`] and [`Status::is_dead_letter`].

use std::fmt;
use std::str::FromStr;

/// Where an intent stands. Terminal statuses never change again.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "sqlx",
    derive(sqlx::Type),
    sqlx(type_name = "oncebox.intent_status", rename_all = "snake_case")
)]
pub enum Status {
    /// Accepted, and held for people to approve it (its action's approval policy): no worker
    /// takes it until enough of them have.
    AwaitingApproval,
    /// Accepted and waiting for a worker.
    Pending,
    /// A worker holds the lease and may be calling the destination.
    InFlight,
    /// The request may have had an effect; nobody knows yet.
    Unknown,
    /// A worker is looking the effect up at the destination.
    Reconciling,
    /// Automation stopped: a person must decide.
    NeedsReview,
    /// The effect happened exactly once. Terminal.
    Succeeded,
    /// The effect did not and will not happen. Terminal.
    Failed,
    /// Cancelled before dispatch. Terminal.
    Cancelled,
    /// The deadline passed before the effect happened, or the approvals it waited for never
    /// came. Terminal.
    Expired,
    /// A person rejected it while it awaited approval: never sent. Terminal.
    Rejected,
}

use Status::*;

/// Every allowed `(from, to)` transition, one row per source status.
pub const TRANSITIONS: &[(Status, &[Status])] = &[
    (AwaitingApproval, &[Pending, Rejected, Expired]),
    (Pending, &[InFlight, Cancelled, Expired]),
    (InFlight, &[Succeeded, Failed, Pending, Unknown, Expired]),
    (Unknown, &[InFlight, Reconciling, NeedsReview]),
    (Reconciling, &[Succeeded, Pending, NeedsReview, Unknown]),
    (NeedsReview, &[Succeeded, Failed, Pending]),
    (Succeeded, &[]),
    (Failed, &[]),
    (Cancelled, &[]),
    (Expired, &[]),
    (Rejected, &[]),
];

/// What an operator may do (`oncebox ops`, the ops API), and the only table that decides it:
/// `resolve` ends a `needs_review` intent `succeeded` or `failed`; `retry` sends a
/// `needs_review` or `failed` intent back to `pending` with its key; `cancel` ends a `pending`
/// intent that was never dispatched. Every row is an automatic transition of [`TRANSITIONS`]
/// except those in [`OPERATOR_OVERRIDES`]. No operator moves an intent that automation still owns
/// (`in_flight`, `unknown`, `reconciling`): a worker may be calling or looking it up. Nor does
/// any operator move an `awaiting_approval` intent: people decide it by approving or rejecting
/// it (`oncebox_store::approvals`, with its own rules: four eyes, distinct approvers), along
/// the rows of [`TRANSITIONS`].
pub const OPERATOR_TRANSITIONS: &[(Status, &[Status])] = &[
    (Pending, &[Cancelled]),
    (NeedsReview, &[Succeeded, Failed, Pending]),
    (Failed, &[Pending]),
];

/// The operator transitions that leave a terminal status: a failed intent retried by a person,
/// recorded as such in its retry report.
pub const OPERATOR_OVERRIDES: &[(Status, Status)] = &[(Failed, Pending)];

/// A transition that [`TRANSITIONS`] does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an intent cannot go from {from} to {to}")]
pub struct IllegalTransition {
    /// The current status.
    pub from: Status,
    /// The refused target.
    pub to: Status,
}

impl Status {
    /// Every status, in the order of the transition table.
    pub const ALL: [Status; 11] = [
        AwaitingApproval,
        Pending,
        InFlight,
        Unknown,
        Reconciling,
        NeedsReview,
        Succeeded,
        Failed,
        Cancelled,
        Expired,
        Rejected,
    ];

    /// The name used in the database, the API, logs and metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            AwaitingApproval => "awaiting_approval",
            Pending => "pending",
            InFlight => "in_flight",
            Unknown => "unknown",
            Reconciling => "reconciling",
            NeedsReview => "needs_review",
            Succeeded => "succeeded",
            Failed => "failed",
            Cancelled => "cancelled",
            Expired => "expired",
            Rejected => "rejected",
        }
    }

    /// True for statuses that never change again: succeeded, failed, cancelled, expired,
    /// rejected.
    pub fn is_terminal(self) -> bool {
        self.allowed_next().is_empty()
    }

    /// True when automation has nothing more to do: a terminal status, or one waiting for a
    /// person (`needs_review`, `awaiting_approval`). A waiter (`GET …?wait=`, the client's
    /// `wait`) returns here.
    pub fn is_settled(self) -> bool {
        self.is_terminal() || self.waits_for_a_person()
    }

    /// True for the statuses only a person moves on: `needs_review` and `awaiting_approval`.
    pub fn waits_for_a_person(self) -> bool {
        matches!(self, NeedsReview | AwaitingApproval)
    }

    /// True for the statuses that are dead-lettered on entry — failed, expired, needs_review —
    /// each with its own dead-letter queue named after it.
    pub fn is_dead_letter(self) -> bool {
        matches!(self, Failed | Expired | NeedsReview)
    }

    /// True for the statuses an operator may send back to `pending` (`oncebox ops retry`):
    /// failed and needs_review. The originals of their redacted requests are held for it.
    pub fn is_retryable(self) -> bool {
        self.operator_transition(Pending).is_ok()
    }

    /// The statuses that are dead-lettered, in the order of [`Status::ALL`].
    pub fn dead_letter_reasons() -> impl Iterator<Item = Status> {
        Status::ALL.into_iter().filter(|s| s.is_dead_letter())
    }

    /// The statuses this one may move to.
    pub fn allowed_next(self) -> &'static [Status] {
        TRANSITIONS
            .iter()
            .find(|(from, _)| *from == self)
            .map_or(&[], |(_, to)| to)
    }

    /// The statuses an operator may move this one to ([`OPERATOR_TRANSITIONS`]).
    pub fn operator_next(self) -> &'static [Status] {
        OPERATOR_TRANSITIONS
            .iter()
            .find(|(from, _)| *from == self)
            .map_or(&[], |(_, to)| to)
    }

    /// Checks an operator's transition against [`OPERATOR_TRANSITIONS`].
    ///
    /// # Errors
    /// [`IllegalTransition`] when the table does not list `(self, to)`.
    pub fn operator_transition(self, to: Status) -> Result<Status, IllegalTransition> {
        if self.operator_next().contains(&to) {
            Ok(to)
        } else {
            Err(IllegalTransition { from: self, to })
        }
    }

    /// Checks a transition against [`TRANSITIONS`].
    ///
    /// # Errors
    /// [`IllegalTransition`] when the table does not list `(self, to)`.
    pub fn transition(self, to: Status) -> Result<Status, IllegalTransition> {
        if self.allowed_next().contains(&to) {
            Ok(to)
        } else {
            Err(IllegalTransition { from: self, to })
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status name that is not one of [`Status::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown status {0:?}; expected one of awaiting_approval, pending, in_flight, unknown, reconciling, needs_review, succeeded, failed, cancelled, expired, rejected"
)]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented transition table, written out independently of [`TRANSITIONS`] as
    /// (from, to) names.
    const EXPECTED: &[(&str, &str)] = &[
        ("awaiting_approval", "pending"),
        ("awaiting_approval", "rejected"),
        ("awaiting_approval", "expired"),
        ("pending", "in_flight"),
        ("pending", "cancelled"),
        ("pending", "expired"),
        ("in_flight", "succeeded"),
        ("in_flight", "failed"),
        ("in_flight", "pending"),
        ("in_flight", "unknown"),
        ("in_flight", "expired"),
        ("unknown", "in_flight"),
        ("unknown", "reconciling"),
        ("unknown", "needs_review"),
        ("reconciling", "succeeded"),
        ("reconciling", "pending"),
        ("reconciling", "needs_review"),
        ("reconciling", "unknown"),
        ("needs_review", "succeeded"),
        ("needs_review", "failed"),
        ("needs_review", "pending"),
    ];

    #[test]
    fn every_pair_is_allowed_exactly_when_design_lists_it() {
        let mut allowed = 0;
        for from in Status::ALL {
            for to in Status::ALL {
                let listed = EXPECTED.contains(&(from.as_str(), to.as_str()));
                assert_eq!(
                    from.transition(to).is_ok(),
                    listed,
                    "{from} -> {to}: table and documentation disagree"
                );
                allowed += usize::from(listed);
            }
        }
        assert_eq!(allowed, EXPECTED.len());
        assert_eq!(
            Pending.transition(Succeeded),
            Err(IllegalTransition {
                from: Pending,
                to: Succeeded
            })
        );
    }

    #[test]
    fn operators_follow_the_table_except_for_the_listed_overrides() {
        for (from, targets) in OPERATOR_TRANSITIONS {
            for &to in *targets {
                assert!(
                    from.transition(to).is_ok() || OPERATOR_OVERRIDES.contains(&(*from, to)),
                    "operator {from} -> {to} is neither automatic nor a listed override"
                );
                assert_eq!(from.operator_transition(to), Ok(to));
            }
        }
        for &(from, to) in OPERATOR_OVERRIDES {
            assert!(
                from.transition(to).is_err(),
                "{from} -> {to} is no override"
            );
            assert_eq!(from.operator_transition(to), Ok(to));
        }
        // What the issue found: resolving an intent whose outcome is still unknown.
        assert!(Unknown.operator_transition(Succeeded).is_err());
        assert!(Unknown.operator_transition(Failed).is_err());
        for owned in [InFlight, Unknown, Reconciling] {
            assert!(owned.operator_next().is_empty(), "{owned} is automation's");
        }
        // Approvals are people's decisions with rules of their own, never an operator's move.
        assert!(AwaitingApproval.operator_next().is_empty());
        assert!(!AwaitingApproval.is_retryable());
        assert!(Cancelled.operator_transition(Cancelled).is_err());
        assert!(Succeeded.operator_next().is_empty());
    }

    #[test]
    fn settled_and_dead_letter_sets() {
        let settled: Vec<_> = Status::ALL.into_iter().filter(|s| s.is_settled()).collect();
        assert_eq!(
            settled,
            [
                AwaitingApproval,
                NeedsReview,
                Succeeded,
                Failed,
                Cancelled,
                Expired,
                Rejected
            ]
        );
        let dead: Vec<_> = Status::dead_letter_reasons().collect();
        assert_eq!(dead, [NeedsReview, Failed, Expired]);
    }

    #[test]
    fn terminal_statuses_are_exactly_the_five() {
        let terminal: Vec<_> = Status::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(terminal, [Succeeded, Failed, Cancelled, Expired, Rejected]);
    }

    #[test]
    fn names_round_trip_and_table_covers_every_status() {
        for s in Status::ALL {
            assert_eq!(s.as_str().parse::<Status>(), Ok(s));
            assert_eq!(serde_json::to_value(s).expect("serialise"), s.as_str());
            assert_eq!(TRANSITIONS.iter().filter(|(f, _)| *f == s).count(), 1);
        }
        assert!("done".parse::<Status>().is_err());
    }
}
