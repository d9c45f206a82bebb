//! oncebox's delivery protocol as an explicit-state model, checked exhaustively with
//! [stateright](https://docs.rs/stateright): intents (some in one ordering lane, some with a
//! deadline) and their outbox rows; workers that claim (a lease with a new epoch), mark the row
//! dispatched, send, renew their lease, record, look effects up, stop (giving the lease back) and
//! crash at any step, or run slow until their lease expires; a network that loses requests and
//! answers; destinations that honour keys, that can be looked up after a consistency window, and
//! that do neither; operators who retry, resolve and cancel; and people who approve or reject an
//! intent its action's approval policy holds, racing the workers and the end of its approval
//! window.
//!
//! Where the real code decides, the model calls it: the journal's transition and operator tables
//! ([`Status::transition`], [`Status::operator_transition`]), what a claimed row needs
//! ([`protocol::claimed_row`]), what follows an unknown outcome ([`protocol::after_unknown`]),
//! what a lookup's result means ([`protocol::after_lookup`]), which status releases an ordering
//! lane ([`protocol::releases_lane`]) and the retry budget ([`RetryPolicy::next_attempt`]). What
//! the model adds is the store's fence (a write is applied only for the lease's current epoch and
//! holder), the lanes' parking and the world around them. [`Variant`]s break one mechanism each,
//! so the tests can show that the checker finds what the mechanism prevents.
//!
//! The folder: `spec` (the variants, the intents and the bounds of a run), `state` (a state of
//! the world and the steps that move it), `steps` (what each step does; `people` for operators and approvers), `model` (stateright's
//! `Model`: the steps enabled in a state and where each leads), `symmetry` (workers are
//! interchangeable) and [`properties`] (what the checker holds the protocol to, each name a
//! constant the tests use).
//!
//! Time is not modelled as a clock: a lease expiring, a deadline passing and a consistency window
//! passing are steps of their own, which the checker may take at any moment they are allowed.
//!
//! [`Status::transition`]: oncebox_core::status::Status::transition
//! [`Status::operator_transition`]: oncebox_core::status::Status::operator_transition
//! [`protocol::claimed_row`]: oncebox_core::protocol::claimed_row
//! [`protocol::after_unknown`]: oncebox_core::protocol::after_unknown
//! [`protocol::after_lookup`]: oncebox_core::protocol::after_lookup
//! [`protocol::releases_lane`]: oncebox_core::protocol::releases_lane
//! [`RetryPolicy::next_attempt`]: oncebox_core::RetryPolicy::next_attempt

mod model;
mod people;
pub mod properties;
mod spec;
mod state;
mod steps;
mod symmetry;

pub use properties::TWO_INTENTS_TWO_EFFECTS;
pub use spec::*;
pub use state::*;
