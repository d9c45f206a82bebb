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
