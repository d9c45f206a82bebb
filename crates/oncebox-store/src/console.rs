//! What the web console reads and keeps: sessions (an ops token exchanged at login for a random
//! id in a cookie; only the id's SHA-256 is stored, with the session's CSRF token), the workers
//! seen, and a tenant's overview, its intents that need a person, and search.

use std::time::Duration;

use chrono::{DateTime, Utc};
use oncebox_core::Status;
use serde::Serialize;
use sqlx::{FromRow, PgExecutor};

use crate::intent::Intent;
use crate::sql;
use crate::tokens::{Caller, Role};

/// A console session: its caller and the CSRF token its forms carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Who logged in (the ops token's id, tenant and role).
    pub caller: Caller,
    /// The token every state-changing form of this session must carry.
    pub csrf: String,
}

#[derive(FromRow)]
struct SessionRow {
    id: i64,
    tenant_id: String,
    role: Role,
    expires_at: Option<DateTime<Utc>>,
    label: Option<String>,
    csrf: String,
}

/// 32 random bytes as hex.
///
/// # Errors
/// The OS random source failing.
pub fn random_hex() -> Result<String, sqlx::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| sqlx::Error::Protocol(format!("no randomness for a session: {e}")))?;
    Ok(hex::encode(bytes))
}

fn id_hash(session_id: &str) -> String {
    hex::encode(crate::tokens::digest(session_id))
}

/// Opens a session for `caller` (an ops token, checked by the caller of this function) lasting
/// `lifetime`; returns the session's id (for the cookie; never stored) and its CSRF token.
///
/// # Errors
/// The database's error, or the OS random source failing.
pub async fn create_session(
    db: impl PgExecutor<'_>,
    caller: &Caller,
    lifetime: Duration,
) -> Result<(String, String), sqlx::Error> {
    let id = random_hex()?;
    let csrf = random_hex()?;
    sqlx::query(sql::SESSION_CREATE)
        .bind(id_hash(&id))
        .bind(caller.id)
        .bind(&csrf)
        .bind(lifetime.as_secs_f64())
        .execute(db)
        .await?;
    Ok((id, csrf))
}

/// The live session under `session_id`: `None` when unknown, ended, expired, or when its token
/// was revoked or expired.
///
/// # Errors
/// The database's error.
pub async fn session(
    db: impl PgExecutor<'_>,
    session_id: &str,
) -> Result<Option<Session>, sqlx::Error> {
    let row: Option<SessionRow> = sqlx::query_as(sql::SESSION_FIND)
        .bind(id_hash(session_id))
        .fetch_optional(db)
        .await?;
    Ok(row.map(|r| Session {
        caller: Caller {
            id: r.id,
            tenant_id: r.tenant_id,
            role: r.role,
            expires_at: r.expires_at,
            label: r.label,
        },
        csrf: r.csrf,
    }))
}

/// Ends the session under `session_id` (logout).
///
/// # Errors
/// The database's error.
pub async fn end_session(db: impl PgExecutor<'_>, session_id: &str) -> Result<(), sqlx::Error> {
    sqlx::query(sql::SESSION_END)
        .bind(id_hash(session_id))
        .execute(db)
        .await?;
    Ok(())
}

/// How long a login form lasts.
pub const LOGIN_FORM_LIFETIME: Duration = Duration::from_secs(600);

/// Opens a login form (a login page served): returns its id (for the login page's cookie; only
/// its SHA-256 is stored) and the CSRF token the form carries.
///
/// # Errors
/// The database's error, or the OS random source failing.
pub async fn create_login(db: impl PgExecutor<'_>) -> Result<(String, String), sqlx::Error> {
    let id = random_hex()?;
    let csrf = random_hex()?;
    sqlx::query(sql::LOGIN_CREATE)
        .bind(id_hash(&id))
        .bind(&csrf)
        .bind(LOGIN_FORM_LIFETIME.as_secs_f64())
        .execute(db)
        .await?;
    Ok((id, csrf))
}

/// Takes the login form under `login_id` for its login — once, while it lasts — and returns its
/// CSRF token; `None` when the server never served it, it was used, or it expired.
///
/// # Errors
/// The database's error.
pub async fn take_login(
    db: impl PgExecutor<'_>,
    login_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(sql::LOGIN_TAKE)
        .bind(id_hash(login_id))
        .fetch_optional(db)
        .await
}

/// Records that worker `worker` is alive (and whether it claims deliveries); returns how many
/// workers that claim deliveries were seen in the last 15 seconds, this one included.
///
/// # Errors
/// The database's error.
pub async fn worker_seen(
    db: impl PgExecutor<'_>,
    worker: &str,
    delivers: bool,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(sql::WORKER_SEEN)
        .bind(worker)
        .bind(delivers)
        .fetch_one(db)
        .await
}

/// A worker as the console lists it.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct WorkerSeen {
    /// Its id (the lease owner it writes).
    pub worker: String,
    /// Whether it claims deliveries (false: `--reconcile-only`).
    pub delivers: bool,
    /// When it first reported.
    pub started_at: DateTime<Utc>,
    /// When it last reported.
    pub seen_at: DateTime<Utc>,
    /// Seconds since then.
    pub seen_seconds_ago: f64,
}

/// The workers seen in the last day, most recently seen first (at most 200).
///
/// # Errors
/// The database's error.
pub async fn workers(db: impl PgExecutor<'_>) -> Result<Vec<WorkerSeen>, sqlx::Error> {
    sqlx::query_as(sql::WORKERS_LIST).fetch_all(db).await
}

/// How many of a tenant's intents of one action are in one status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, FromRow)]
pub struct Count {
    /// The action.
    pub action: String,
    /// The status.
    pub status: String,
    /// How many.
    pub n: i64,
}

/// `tenant`'s intents per action and status.
///
/// # Errors
/// The database's error.
pub async fn counts(db: impl PgExecutor<'_>, tenant: &str) -> Result<Vec<Count>, sqlx::Error> {
    sqlx::query_as(sql::CONSOLE_COUNTS)
        .bind(tenant)
        .fetch_all(db)
        .await
}

/// Intents of a tenant completed in one minute of the last hour, in one status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, FromRow)]
pub struct Completed {
    /// Minutes ago (0 = this minute, up to 59).
    pub minutes_ago: i32,
    /// The terminal status.
    pub status: String,
    /// How many.
    pub n: i64,
}

/// `tenant`'s intents completed per minute over the last hour, by status.
///
/// # Errors
/// The database's error.
pub async fn completed_per_minute(
    db: impl PgExecutor<'_>,
    tenant: &str,
) -> Result<Vec<Completed>, sqlx::Error> {
    sqlx::query_as(sql::CONSOLE_COMPLETED)
        .bind(tenant)
        .fetch_all(db)
        .await
}

/// `tenant`'s ready deliveries: how many (up to 100,000) and the oldest's age.
///
/// # Errors
/// The database's error.
pub async fn ready(
    db: impl PgExecutor<'_>,
    tenant: &str,
) -> Result<crate::queue::ReadyQueue, sqlx::Error> {
    sqlx::query_as(sql::CONSOLE_READY)
        .bind(tenant)
        .fetch_one(db)
        .await
}

/// The statuses an intent may need a person in, as the console's list offers them.
pub const NEEDS_A_PERSON: [Status; 4] = [
    Status::NeedsReview,
    Status::Unknown,
    Status::Failed,
    Status::Expired,
];

/// Which intents that need a person to list, and which page.
#[derive(Debug, Clone)]
pub struct AttentionFilter {
    /// The tenant (always: the console is scoped to its token's tenant).
    pub tenant_id: String,
    /// Statuses, a subset of [`NEEDS_A_PERSON`].
    pub statuses: Vec<Status>,
    /// Only these actions (all when `None`).
    pub actions: Option<Vec<String>>,
    /// Only intents unchanged for this long.
    pub older_than: Option<Duration>,
    /// Newest first (else oldest first).
    pub newest_first: bool,
    /// The page after this intent's `(updated_at, id)`.
    pub after: Option<(DateTime<Utc>, i64)>,
    /// At most this many.
    pub limit: i64,
}

/// Intents that need a person, by [`AttentionFilter`].
///
/// # Errors
/// The database's error.
pub async fn attention(
    db: impl PgExecutor<'_>,
    f: &AttentionFilter,
) -> Result<Vec<Intent>, sqlx::Error> {
    let statuses: Vec<&str> = f.statuses.iter().map(|s| s.as_str()).collect();
    sqlx::query_as(sql::CONSOLE_ATTENTION)
        .bind(&f.tenant_id)
        .bind(statuses)
        .bind(f.actions.as_deref())
        .bind(f.older_than.map(|d| d.as_secs_f64()))
        .bind(f.after.map(|(at, _)| at))
        .bind(f.after.map_or(0, |(_, id)| id))
        .bind(f.newest_first)
        .bind(f.limit)
        .fetch_all(db)
        .await
}

/// `tenant`'s intents whose key or business reference is `query`, newest first (at most 50).
///
/// # Errors
/// The database's error.
pub async fn search(
    db: impl PgExecutor<'_>,
    tenant: &str,
    query: &str,
) -> Result<Vec<Intent>, sqlx::Error> {
    sqlx::query_as(sql::CONSOLE_SEARCH)
        .bind(tenant)
        .bind(query)
        .fetch_all(db)
        .await
}
