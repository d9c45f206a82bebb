//! The ready queue as gauges see it — how many deliveries wait, and for how long the oldest
//! has — and the readiness ping.

use sqlx::PgExecutor;

/// The ready, unleased deliver rows.
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct ReadyQueue {
    /// How many (counted up to 100,000).
    pub depth: i64,
    /// Age of the oldest, in seconds (0 when there is none).
    pub oldest_seconds: f64,
}

/// Reads the ready queue's depth and oldest age: a bounded count over the ready index.
///
/// # Errors
/// The database's error.
pub async fn ready_queue(db: impl PgExecutor<'_>) -> Result<ReadyQueue, sqlx::Error> {
    sqlx::query_as(crate::sql::READY_QUEUE).fetch_one(db).await
}

/// Asks the database `SELECT 1`: it answers queries.
///
/// # Errors
/// The database's error.
pub async fn ping(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    sqlx::query(crate::sql::PING).execute(db).await?;
    Ok(())
}

/// Intents waiting in one status, or the unpublished dead letters.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct WaitingGauge {
    /// `unknown`, `reconciling`, `needs_review`, `awaiting_approval`, or `dead_letter` for
    /// unpublished dead letters.
    pub gauge: String,
    /// How many.
    pub n: i64,
    /// Age in seconds of the one waiting longest (0 when there is none).
    pub oldest_seconds: f64,
}

/// Reads the waiting gauges: intents waiting for reconciliation or a person per status (only
/// statuses with some), over the `intents_waiting` and `intents_awaiting_approval` indexes, and
/// the dead letters not yet
/// published (always one row, `dead_letter`).
///
/// # Errors
/// The database's error.
pub async fn waiting_gauges(db: impl PgExecutor<'_>) -> Result<Vec<WaitingGauge>, sqlx::Error> {
    sqlx::query_as(crate::sql::WAITING_GAUGES)
        .fetch_all(db)
        .await
}
