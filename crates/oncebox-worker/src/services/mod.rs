//! The services a worker runs under its supervisor, each a loop until stop: the claimer (with
//! its dispatch and wake-up policy), the completer, the renewer, the reconciler, the asker, the
//! dead-letter notifier and the gauges.

pub(crate) mod ask;
pub(crate) mod claimer;
pub(crate) mod completer;
pub(crate) mod dead_letter;
pub(crate) mod dispatch;
pub(crate) mod gauges;
pub(crate) mod reconciler;
pub(crate) mod renewer;
pub(crate) mod wakeup;
