//! API bearer tokens: random, shown once, stored as SHA-256 hex, scoped to a tenant and a role.

use sha2::{Digest, Sha256};
use sqlx::PgExecutor;

/// What a token may do (the enum type `oncebox.token_role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "oncebox.token_role", rename_all = "snake_case")]
pub enum Role {
    /// Submit, read and cancel its tenant's intents.
    Agent,
    /// Everything an agent may, plus the ops endpoints.
    Ops,
}

impl Role {
    /// Every role (the labels of `oncebox.token_role`).
    pub const ALL: [Role; 2] = [Role::Agent, Role::Ops];

    /// The role's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Ops => "ops",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?}; expected agent or ops"))
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Caller {
    /// The tenant every query is scoped to.
    pub tenant_id: String,
    /// What it may do.
    pub role: Role,
}

/// The SHA-256 of a token, as stored (and as the API's cache keys it): a token is never kept.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn digest_hex(token: &str) -> String {
    hex::encode(digest(token))
}

/// Creates a token for `tenant` with `role`; returns the token, which is never stored.
///
/// # Errors
/// The database's error, or the OS random source failing.
pub async fn create_token(
    db: impl PgExecutor<'_>,
    tenant: &str,
    role: Role,
    label: Option<&str>,
) -> Result<String, sqlx::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| sqlx::Error::Protocol(format!("no randomness for a token: {e}")))?;
    let token = format!("obx_{}", hex::encode(bytes));
    sqlx::query(crate::sql::TOKEN_CREATE)
        .bind(tenant)
        .bind(role)
        .bind(digest_hex(&token))
        .bind(label)
        .execute(db)
        .await?;
    Ok(token)
}

/// Revokes `token`: from now on the database refuses it (an API process that checked it in
/// the last few seconds may still accept it until its cache expires). Returns whether a token
/// that was not yet revoked was found.
///
/// # Errors
/// The database's error.
pub async fn revoke_token(db: impl PgExecutor<'_>, token: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(crate::sql::TOKEN_REVOKE)
        .bind(digest_hex(token))
        .execute(db)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The caller a token belongs to; `None` for unknown or revoked tokens.
///
/// # Errors
/// The database's error.
pub async fn authenticate(
    db: impl PgExecutor<'_>,
    token: &str,
) -> Result<Option<Caller>, sqlx::Error> {
    sqlx::query_as(crate::sql::TOKEN_AUTHENTICATE)
        .bind(digest_hex(token))
        .fetch_optional(db)
        .await
}
