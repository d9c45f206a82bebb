//! What the web console reads and keeps: sessions (an ops token exchanged at login for a random
//! id in a cookie; only the id's SHA-256 is stored, with the session's CSRF token), the workers
//! seen, and a tenant's overview, its intents that need a person, and search.

use std::time::Duration;

use chrono::{DateTime, Utc};
use oncebox_core::Status;
use serde::Serialize;
use sqlx::{FromRow, PgExecutor};

use crate::intent::Intent;
use crate::ops::Actor;
use crate::sql;
use crate::tokens::{Caller, Role};
use oncebox_core::Principal;

/// A console session: who signed in and the CSRF token its forms carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Who: the token's principal, or the person's signed in through OpenID Connect.
    pub principal: Principal,
    /// The tenant every query is scoped to.
    pub tenant_id: String,
    /// What they may do (the console serves the ops role only).
    pub role: Role,
    /// A name for people: the token's label, or the person's e-mail.
    pub label: Option<String>,
    /// The token signed in with; `None` for a person signed in through OpenID Connect.
    pub token_id: Option<i64>,
    /// The token every state-changing form of this session must carry.
    pub csrf: String,
}

impl Session {
    /// This session's person as the actor of a decision through `via`.
    pub fn actor(&self, via: &str) -> Actor {
        Actor::new(self.principal.to_string(), self.role.as_str(), via)
            .with_label(self.label.as_deref())
    }
}

/// A person signed in through OpenID Connect, as their console session records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// Their principal (`oidc:ISSUER#SUBJECT`).
    pub principal: Principal,
    /// Their e-mail, when the provider gave one.
    pub email: Option<String>,
    /// The tenant their groups map to.
    pub tenant_id: String,
    /// The role their groups map to.
    pub role: Role,
}

#[derive(FromRow)]
struct SessionRow {
    token_id: Option<i64>,
    holder: Option<String>,
    principal: Option<String>,
    tenant_id: String,
    role: Role,
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
    insert_session(db, Some(caller.id), None, lifetime).await
}

/// Opens a session for `person`, signed in through OpenID Connect (their ID token checked and
/// their groups mapped by the caller of this function), lasting `lifetime`; returns the
/// session's id (for the cookie; never stored) and its CSRF token.
///
/// # Errors
/// The database's error, or the OS random source failing.
pub async fn create_person_session(
    db: impl PgExecutor<'_>,
    person: &SignedIn,
    lifetime: Duration,
) -> Result<(String, String), sqlx::Error> {
    insert_session(db, None, Some(person), lifetime).await
}

async fn insert_session(
    db: impl PgExecutor<'_>,
    token_id: Option<i64>,
    person: Option<&SignedIn>,
    lifetime: Duration,
) -> Result<(String, String), sqlx::Error> {
    let id = random_hex()?;
    let csrf = random_hex()?;
    sqlx::query(sql::SESSION_CREATE)
        .bind(id_hash(&id))
        .bind(token_id)
        .bind(&csrf)
        .bind(lifetime.as_secs_f64())
        .bind(person.map(|p| p.principal.to_string()))
        .bind(person.and_then(|p| p.email.as_deref()))
        .bind(person.map(|p| p.tenant_id.as_str()))
        .bind(person.map(|p| p.role))
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
    let Some(r) = row else { return Ok(None) };
    let principal = match (r.token_id, r.holder, r.principal) {
        (Some(_), Some(holder), _) => Principal::of_holder(&holder),
        (Some(id), None, _) => Principal::Token(id),
        (None, _, Some(text)) => Principal::parse("console_sessions.principal", &text)
            .map_err(|e| sqlx::Error::Decode(Box::new(e)))?,
        (None, _, None) => {
            return Err(sqlx::Error::Protocol(
                "a console session names neither a token nor a principal".into(),
            ));
        }
    };
    Ok(Some(Session {
        principal,
        tenant_id: r.tenant_id,
        role: r.role,
        label: r.label,
        token_id: r.token_id,
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
    insert_login(db, None).await
}

/// What an OpenID Connect sign-in keeps on the server while the person is at their provider:
/// the `nonce` its ID token must carry and the PKCE verifier of its code.
#[derive(Debug, Clone, PartialEq, Eq, FromRow)]
pub struct SignInSecrets {
    /// The nonce sent to the provider.
    pub nonce: String,
    /// The PKCE code verifier.
    pub pkce_verifier: String,
}

/// Opens a sign-in through OpenID Connect: a login form whose CSRF token is the `state` sent to
/// the provider, kept with `secrets`. Returns its id (for the cookie) and the state.
///
/// # Errors
/// The database's error, or the OS random source failing.
pub async fn create_sign_in(
    db: impl PgExecutor<'_>,
    secrets: &SignInSecrets,
) -> Result<(String, String), sqlx::Error> {
    insert_login(db, Some(secrets)).await
}

async fn insert_login(
    db: impl PgExecutor<'_>,
    secrets: Option<&SignInSecrets>,
) -> Result<(String, String), sqlx::Error> {
    let id = random_hex()?;
    let csrf = random_hex()?;
    sqlx::query(sql::LOGIN_CREATE)
        .bind(id_hash(&id))
        .bind(&csrf)
        .bind(LOGIN_FORM_LIFETIME.as_secs_f64())
        .bind(secrets.map(|s| s.nonce.as_str()))
        .bind(secrets.map(|s| s.pkce_verifier.as_str()))
        .execute(db)
        .await?;
    Ok((id, csrf))
}

/// A login form taken: its CSRF token (a sign-in's `state`) and, for a sign-in through OpenID
/// Connect, its secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenLogin {
    /// The CSRF token.
    pub csrf: String,
    /// The sign-in's nonce and verifier; `None` for a token login form.
    pub sign_in: Option<SignInSecrets>,
}

/// Takes the login form under `login_id` for its login — once, while it lasts — and returns
/// what it kept; `None` when the server never served it, it was used, or it expired.
///
/// # Errors
/// The database's error.
pub async fn take_login(
    db: impl PgExecutor<'_>,
    login_id: &str,
) -> Result<Option<TakenLogin>, sqlx::Error> {
    let row: Option<(String, Option<String>, Option<String>)> = sqlx::query_as(sql::LOGIN_TAKE)
        .bind(id_hash(login_id))
        .fetch_optional(db)
        .await?;
    Ok(row.map(|(csrf, nonce, verifier)| TakenLogin {
        csrf,
        sign_in: nonce
            .zip(verifier)
            .map(|(nonce, pkce_verifier)| SignInSecrets {
                nonce,
                pkce_verifier,
            }),
    }))
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
    pub status: Status,
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
    pub status: Status,
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
