//! The worker pool (DESIGN §5 Claim, Dispatch, Record, Classify, Unknown).
//!
//! One [`run`] call is one worker: it claims batches of deliver-phase outbox rows (SKIP LOCKED,
//! lease, epoch + 1), marks rows for destinations that do not honour keys as dispatched (fenced)
//! before calling them, delivers with bounded concurrency, and records outcomes in batches,
//! fenced on the epoch. No database transaction is open while a destination is called.
//! Run as many worker processes as you like: SKIP LOCKED shares the work.

mod dead_letter;
mod decide;
mod metrics;
mod reconcile;
mod routes;
mod worker;

pub use dead_letter::{REASONS, connect as connect_dead_letters, message as dead_letter_message};
pub use decide::decide;
pub use metrics::{Metrics, Probes};
pub use reconcile::{Reconciling, decide_reconcile, look_again_in};
pub use routes::{Adapter, Route, RouteError, Routes};
pub use worker::{WorkerError, WorkerSettings, run};
