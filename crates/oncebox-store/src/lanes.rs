//! Ordering lanes (migration 0011): intents of one tenant and destination submitted with the same
//! `ordering_key` are delivered one at a time, in submit order. Submit numbers them
//! (`submit_ordered.sql`) and parks all but the lane's head; a trigger on the journal moves the
//! head on when it is released. This module is what operators and workers read and repair;
//! skipping a blocked head is [`crate::ops::skip`].

use chrono::{DateTime, Utc};
use oncebox_core::Status;
use serde::Serialize;
use sqlx::{FromRow, PgExecutor};

use crate::sql;

/// One lane with work: its head running, waiting, or blocked.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct LaneRow {
    /// The tenant.
    pub tenant_id: String,
    /// The destination its intents go to.
    pub destination: String,
    /// The ordering key.
    pub ordering_key: String,
    /// Intents still to go, the head included (an upper bound: a cancelled one keeps its place).
    pub queued: i64,
    /// Whether the lane goes on past a failed head (`on_failure = "skip"`).
    pub skip_failed: bool,
    /// The head's id, when it exists (a purged head leaves none; the repair sweep moves on).
    pub head_id: Option<i64>,
    /// The head's idempotency key.
    pub head_key: Option<String>,
    /// The head's status.
    pub head_status: Option<Status>,
    /// Since when the head is as it is.
    pub since: DateTime<Utc>,
    /// The head ended failed, expired or needs_review and holds the lane until an operator
    /// retries, resolves or skips it.
    pub blocked: bool,
}

/// The lanes with work, of `tenant` when given, only the blocked ones with `blocked_only`, at
/// most `limit`, blocked first and then the longest waiting.
///
/// # Errors
/// The database's error.
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant: Option<&str>,
    blocked_only: bool,
    limit: i64,
) -> Result<Vec<LaneRow>, sqlx::Error> {
    sqlx::query_as(sql::LANES_LIST)
        .bind(tenant)
        .bind(blocked_only)
        .bind(limit)
        .fetch_all(db)
        .await
}

/// How many lanes are blocked by a head that ended failed, expired or needs_review.
///
/// # Errors
/// The database's error.
pub async fn blocked(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql::LANES_BLOCKED).fetch_one(db).await
}

/// The repair sweep: moves on lanes whose head has nothing left to do (a number a racing replay
/// left without an intent) and unparks a live head still parked. Returns how many lanes it
/// repaired; workers run it every few seconds.
///
/// # Errors
/// The database's error.
pub async fn repair(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql::LANES_REPAIR).fetch_one(db).await
}
