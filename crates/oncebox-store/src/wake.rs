//! Waking idle workers without paying for NOTIFY under load.
//!
//! NOTIFY takes a cluster-wide lock at commit and holds it through the WAL flush, so notifying
//! transactions commit one at a time (measured: intake falls to a third). Submits therefore
//! notify only while some worker has said it is waiting. The worker's protocol:
//!
//! 1. `LISTEN` on [`crate::OUTBOX_CHANNEL`] (again after every lost connection);
//! 2. [`register_waiting`], then claim once more — a row committed before the registration (or
//!    while LISTEN was down) is found here;
//! 3. wait for a notification or the polling interval, refreshing the registration well within
//!    the minute after which it stops counting; take every notification already received
//!    before the next claim (never after it);
//! 4. [`deregister_waiting`] once the pool's work comes faster than the worker's notify rate
//!    (the worker then polls, and every poll finds work), and start again at 2 once it slows.
//!
//! A submit whose snapshot predates step 2 and which commits after step 2's claim is found by
//! the next poll: the polling fallback bounds every wake-up delay. A crashed worker's stale row
//! stops counting after a minute.

use sqlx::PgExecutor;

/// Marks `worker` as waiting for work (or refreshes the mark): submits will NOTIFY.
///
/// # Errors
/// The database's error.
pub async fn register_waiting(db: impl PgExecutor<'_>, worker: &str) -> Result<(), sqlx::Error> {
    sqlx::query(crate::sql::WAIT_REGISTER)
        .bind(worker)
        .execute(db)
        .await?;
    Ok(())
}

/// Removes `worker`'s waiting mark: it has work, or is stopping.
///
/// # Errors
/// The database's error.
pub async fn deregister_waiting(db: impl PgExecutor<'_>, worker: &str) -> Result<(), sqlx::Error> {
    sqlx::query(crate::sql::WAIT_DEREGISTER)
        .bind(worker)
        .execute(db)
        .await?;
    Ok(())
}
