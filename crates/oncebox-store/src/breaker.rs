//! Circuit breakers held in Postgres for the whole pool (`oncebox.destination_state`): a run
//! of failures opens a destination, one probe after its cool-down closes it again, a 410 or an
//! operator disables it until an operator enables it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{FromRow, PgExecutor};

use crate::sql;

/// One destination's breaker.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct DestinationState {
    /// The destination.
    pub destination: String,
    /// `closed`, `open`, `half_open` or `disabled`.
    pub state: String,
    /// The current run of failures.
    pub failures: i32,
    /// When the next probe may go (open), or when the probe under way times out (half_open).
    pub probe_at: Option<DateTime<Utc>>,
    /// Seconds until `probe_at` (negative once passed).
    pub probe_in_seconds: Option<f64>,
    /// Why it is disabled.
    pub reason: Option<String>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
}

/// Every destination's breaker.
///
/// # Errors
/// The database's error.
pub async fn states(db: impl PgExecutor<'_>) -> Result<Vec<DestinationState>, sqlx::Error> {
    sqlx::query_as(sql::BREAKER_STATES).fetch_all(db).await
}

/// Counts a failure of `destination`; opens it at `threshold` failures in a row for
/// `cool_down`. Returns the state after.
///
/// # Errors
/// The database's error.
pub async fn failed(
    db: impl PgExecutor<'_>,
    destination: &str,
    threshold: u32,
    cool_down: Duration,
) -> Result<String, sqlx::Error> {
    sqlx::query_scalar(sql::BREAKER_FAILURE)
        .bind(destination)
        .bind(i32::try_from(threshold).unwrap_or(i32::MAX))
        .bind(cool_down.as_secs_f64())
        .fetch_one(db)
        .await
}

/// `destination` answered: closes it (unless disabled). Returns whether anything changed.
///
/// # Errors
/// The database's error.
pub async fn answered(db: impl PgExecutor<'_>, destination: &str) -> Result<bool, sqlx::Error> {
    let changed: Option<String> = sqlx::query_scalar(sql::BREAKER_SUCCESS)
        .bind(destination)
        .fetch_optional(db)
        .await?;
    Ok(changed.is_some())
}

/// Claims the one probe of an open `destination` whose cool-down passed; `true` when this
/// caller sends it (the breaker is then half-open for `timeout`).
///
/// # Errors
/// The database's error.
pub async fn claim_probe(
    db: impl PgExecutor<'_>,
    destination: &str,
    timeout: Duration,
) -> Result<bool, sqlx::Error> {
    let won: Option<String> = sqlx::query_scalar(sql::BREAKER_PROBE)
        .bind(destination)
        .bind(timeout.as_secs_f64())
        .fetch_optional(db)
        .await?;
    Ok(won.is_some())
}

/// Disables `destination` with `reason` until [`enable`].
///
/// # Errors
/// The database's error.
pub async fn disable(
    db: impl PgExecutor<'_>,
    destination: &str,
    reason: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(sql::BREAKER_DISABLE)
        .bind(destination)
        .bind(reason)
        .execute(db)
        .await?;
    Ok(())
}

/// Enables `destination` again: closed, no failures.
///
/// # Errors
/// The database's error.
pub async fn enable(db: impl PgExecutor<'_>, destination: &str) -> Result<(), sqlx::Error> {
    sqlx::query(sql::BREAKER_ENABLE)
        .bind(destination)
        .execute(db)
        .await?;
    Ok(())
}
