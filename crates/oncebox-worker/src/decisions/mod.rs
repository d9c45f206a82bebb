//! The worker's pure decisions: no I/O, time and jitter passed in, so that every rule is tested
//! exhaustively beside the services that apply them.

pub(crate) mod decide;
pub(crate) mod reconcile;
