//! Circuit breakers held in Postgres for the whole pool (`oncebox.destination_state`): a run
//! of failures opens a destination, one probe after its cool-down closes it again, a 410 or an
//! operator disables it until an operator enables it. And request rates: a token bucket per
//! destination for the whole pool, paused by a Retry-After.

use std::collections::HashMap;
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

/// Enables `destination` again — closed, no failures — and makes every waiting delivery of its
/// `actions` ready now, in one transaction (see park.sql for how this is ordered against a
/// worker parking rows at the same moment). Returns how many deliveries were made ready.
///
/// # Errors
/// The database's error; then nothing changed.
pub async fn enable(
    pool: &sqlx::PgPool,
    destination: &str,
    actions: &[String],
) -> Result<i64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(sql::BREAKER_ENABLE)
        .bind(destination)
        .execute(&mut *tx)
        .await?;
    let ready: i64 = sqlx::query_scalar(sql::DESTINATION_READY)
        .bind(actions)
        .bind(sql::OUTBOX_CHANNEL)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(ready)
}

/// Parks leased deliver rows of `destination` (fenced) while it is disabled: gives their leases
/// back without an attempt, each row waiting `wait` or until its intent's deadline, whichever
/// comes first; a row of a destination enabled meanwhile is made ready at once instead.
/// Returns the intents given back.
///
/// # Errors
/// The database's error.
pub async fn park(
    db: impl PgExecutor<'_>,
    worker: &str,
    leases: &[crate::Lease],
    destination: &str,
    wait: Duration,
) -> Result<Vec<i64>, sqlx::Error> {
    let (ids, epochs) = crate::lease::columns(leases);
    sqlx::query_scalar(sql::PARK)
        .bind(ids)
        .bind(epochs)
        .bind(worker)
        .bind(crate::Phase::Deliver)
        .bind(destination)
        .bind(wait.as_secs_f64())
        .fetch_all(db)
        .await
}

/// Tokens wanted of one destination's pool-wide bucket, refilled at `per_second` up to `burst`.
#[derive(Debug, Clone, PartialEq)]
pub struct TokensWanted {
    /// The destination.
    pub destination: String,
    /// Tokens wanted.
    pub n: usize,
    /// The bucket's refill rate.
    pub per_second: f64,
    /// The bucket's size.
    pub burst: f64,
}

/// Takes tokens of every destination in `wanted` in one statement (buckets locked in name
/// order): for each destination, how many were taken and how long until more may go (the rest
/// wait that long). A destination named twice is counted once, by its first entry.
///
/// # Errors
/// The database's error.
pub async fn take_tokens(
    db: &sqlx::PgPool,
    wanted: &[TokensWanted],
) -> Result<HashMap<String, (usize, Duration)>, sqlx::Error> {
    let mut taken = HashMap::with_capacity(wanted.len());
    let mut left: Vec<&TokensWanted> = Vec::with_capacity(wanted.len());
    for w in wanted {
        if !left.iter().any(|l| l.destination == w.destination) {
            left.push(w);
        }
    }
    // The first take of a destination creates its bucket, which the same statement cannot see
    // yet: the second take finds it.
    for _ in 0..2 {
        if left.is_empty() {
            break;
        }
        let rows: Vec<(String, i32, f64)> = sqlx::query_as(sql::RATE_TAKE)
            .bind(
                left.iter()
                    .map(|w| w.destination.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                left.iter()
                    .map(|w| i32::try_from(w.n).unwrap_or(i32::MAX))
                    .collect::<Vec<_>>(),
            )
            .bind(left.iter().map(|w| w.per_second).collect::<Vec<_>>())
            .bind(left.iter().map(|w| w.burst).collect::<Vec<_>>())
            .fetch_all(db)
            .await?;
        for (destination, n, wait) in rows {
            let wait = Duration::from_secs_f64(wait.clamp(0.0, 3600.0));
            taken.insert(destination, (usize::try_from(n).unwrap_or(0), wait));
        }
        left.retain(|w| !taken.contains_key(&w.destination));
    }
    for w in left {
        taken.insert(w.destination.clone(), (0, Duration::from_millis(100)));
    }
    Ok(taken)
}

/// Pauses `destination` for every worker for `delay` (a 429 or 503 with Retry-After).
///
/// # Errors
/// The database's error.
pub async fn slow_down(
    db: impl PgExecutor<'_>,
    destination: &str,
    delay: Duration,
) -> Result<(), sqlx::Error> {
    sqlx::query(sql::RATE_SLOW)
        .bind(destination)
        .bind(delay.as_secs_f64())
        .execute(db)
        .await?;
    Ok(())
}
