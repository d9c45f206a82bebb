//! The worker pool (docs/architecture.md, "Claim", "Dispatch", "Record", "Unknown outcomes").
//!
//! One [`run`] call is one worker: a few services under a supervisor. The claimer leases batches
//! of deliver rows (SKIP LOCKED, lease, epoch + 1), marks rows for destinations that do not
//! honour keys as dispatched (fenced) before calling them, and delivers with bounded
//! concurrency; the completer records outcomes in batches, fenced on the epoch; the renewer
//! keeps leases alive; the reconciler looks unknown outcomes up; the notifier publishes dead
//! letters; gauges read the ready queue. No database transaction is open while a destination is
//! called. Run as many worker processes as you like: SKIP LOCKED shares the work.
//!
//! The folder: `services/` holds the loops the supervisor runs (and the claimer's parts:
//! `dispatch`, `wakeup`); `decisions/` the pure functions they apply (`decide`: an attempt's
//! outcome to the next status; `reconcile`: a lookup's result to the next step), which take time
//! and jitter as arguments and do no I/O; beside them the worker's shared parts (`context`,
//! `breaker`, `routes`, `settings`, `metrics`, `probes`) and the supervisor (`worker`, `service`).

mod breaker;
mod context;
mod crash;
mod decisions;
pub mod metrics;
mod probes;
mod routes;
mod service;
mod services;
mod settings;
#[cfg(test)]
mod testing;
mod worker;

pub use decisions::decide::{Attempted, decide};
pub use decisions::reconcile::{Reconciling, decide_reconcile, look_again_in};
pub use metrics::Metrics;
pub use probes::{Probes, serve as serve_probes};
pub use routes::{Adapter, Route, RouteError, Routes};
pub use service::ServiceFailed;
pub use services::ask::{ASK_ACTION, ask_key, console_link, message as approval_request_message};
pub use services::dead_letter::{
    connect as connect_dead_letters, message as dead_letter_message, reasons,
};
pub use settings::{LEASE_MARGIN, WorkerSettings};
pub use worker::{WorkerError, run};
