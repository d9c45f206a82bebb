//! Outbox work and the right to do it: the [`Phase`] of an outbox row and the [`Lease`] a claim
//! grants on it (docs/architecture.md, "Claim" and "Fencing").

use serde::Serialize;

/// The kind of work an outbox row holds (the enum type `oncebox.phase`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "oncebox.phase", rename_all = "snake_case")]
pub enum Phase {
    /// Deliver the intent to its destination.
    Deliver,
    /// Look an unknown outcome up at the destination.
    Reconcile,
    /// Publish a dead-letter notification.
    Notify,
    /// Tell an approval policy's `notify` destination that an intent awaits approval.
    Ask,
}

impl Phase {
    /// Every phase (the labels of `oncebox.phase`).
    pub const ALL: [Phase; 4] = [Phase::Deliver, Phase::Reconcile, Phase::Notify, Phase::Ask];

    /// The name stored in `outbox.phase`, used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Deliver => "deliver",
            Phase::Reconcile => "reconcile",
            Phase::Notify => "notify",
            Phase::Ask => "ask",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A worker's time-bounded right to work on one outbox row: the intent (with the phase, the
/// row's identity) and the fencing epoch its claim set. Every write after the claim is
/// conditional on both, so a worker whose lease was taken over writes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, sqlx::FromRow)]
pub struct Lease {
    /// The intent the row works on.
    pub intent_id: i64,
    /// The epoch of this claim.
    pub epoch: i64,
}

/// The intent ids and epochs of `leases`, as the two arrays fenced statements take.
pub(crate) fn columns(leases: &[Lease]) -> (Vec<i64>, Vec<i64>) {
    leases.iter().map(|l| (l.intent_id, l.epoch)).unzip()
}
