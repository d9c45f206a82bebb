//! The worker pool (docs/architecture.md, "Claim", "Dispatch", "Record", "Unknown outcomes").
//!
//! One [`run`] call is one worker: a few services under a supervisor. The claimer leases batches
//! of deliver rows (SKIP LOCKED, lease, epoch + 1), marks rows for destinations that do not
//! honour keys as dispatched (fenced) before calling them, and delivers with bounded
//! concurrency; the completer records outcomes in batches, fenced on the epoch; the renewer
//! keeps leases alive; the reconciler looks unknown outcomes up; the notifier publishes dead
//! letters; gauges read the ready queue. No database transaction is open while a destination is
//! called. Run as many worker processes as you like: SKIP LOCKED shares the work.

mod ask;
mod breaker;
mod claimer;
mod completer;
mod context;
mod crash;
mod dead_letter;
mod decide;
mod dispatch;
mod gauges;
pub mod metrics;
mod probes;
mod reconcile;
mod reconciler;
mod renewer;
mod routes;
mod service;
mod settings;
#[cfg(test)]
mod testing;
mod wakeup;
mod worker;

pub use ask::{ASK_ACTION, ask_key, console_link, message as approval_request_message};
pub use dead_letter::{connect as connect_dead_letters, message as dead_letter_message, reasons};
pub use decide::{Attempted, decide};
pub use metrics::Metrics;
pub use probes::{Probes, serve as serve_probes};
pub use reconcile::{Reconciling, decide_reconcile, look_again_in};
pub use routes::{Adapter, Route, RouteError, Routes};
pub use service::ServiceFailed;
pub use settings::{LEASE_MARGIN, WorkerSettings};
pub use worker::{WorkerError, run};
