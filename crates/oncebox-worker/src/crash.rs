//! Test hooks for crash and liveness tests, never set in production: `ONCEBOX_CRASH_AT=POINT`
//! aborts the process at a named point — `after_claim` (leased, nothing dispatched) or
//! `after_call` (the destination answered, nothing recorded); `hang_POINT` wedges the task there
//! for ever, as a call that never returns would (what the liveness probe exists to catch);
//! `panic:SERVICE` makes that service panic (what the supervisor exists to catch).

use std::sync::OnceLock;

fn wanted() -> Option<&'static str> {
    static WANTED: OnceLock<Option<String>> = OnceLock::new();
    WANTED
        .get_or_init(|| std::env::var("ONCEBOX_CRASH_AT").ok())
        .as_deref()
}

/// Aborts, or hangs, at `point` when the hook names it.
pub(crate) async fn point(point: &str) {
    let Some(wanted) = wanted() else {
        return;
    };
    if wanted == point {
        tracing::error!(point, "ONCEBOX_CRASH_AT: aborting the process");
        std::process::abort();
    }
    if wanted.strip_prefix("hang_") == Some(point) {
        tracing::error!(point, "ONCEBOX_CRASH_AT: hanging here for ever");
        std::future::pending::<()>().await;
    }
}

/// Panics in `service` when the hook says `panic:SERVICE`.
pub(crate) fn panic_in(service: &str) {
    if wanted().and_then(|w| w.strip_prefix("panic:")) == Some(service) {
        panic!("ONCEBOX_CRASH_AT: panic in the {service} service");
    }
}
