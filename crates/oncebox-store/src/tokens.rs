//! API bearer tokens: random, shown once, stored as SHA-256 hex, scoped to a tenant and a role.

use sha2::{Digest, Sha256};
use sqlx::PgConnection;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Submit, read and cancel its tenant's intents.
    Agent,
    /// Everything an agent may, plus the ops endpoints.
    Ops,
}

impl Role {
    /// The name stored in `api_tokens.role`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Agent => "agent",
            Role::Ops => "ops",
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The tenant every query is scoped to.
    pub tenant_id: String,
    /// What it may do.
    pub role: Role,
}

fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Creates a token for `tenant` with `role`; returns the token, which is never stored.
///
/// # Errors
/// The database's error, or the OS random source failing.
pub async fn create_token(
    conn: &mut PgConnection,
    tenant: &str,
    role: Role,
    label: Option<&str>,
) -> Result<String, sqlx::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| sqlx::Error::Protocol(format!("no randomness for a token: {e}")))?;
    let token = format!("obx_{}", hex::encode(bytes));
    sqlx::query("INSERT INTO oncebox.api_tokens (tenant_id, role, token_hash, label) VALUES ($1, $2, $3, $4)")
        .bind(tenant)
        .bind(role.as_str())
        .bind(digest(&token))
        .bind(label)
        .execute(conn)
        .await?;
    Ok(token)
}

/// Revokes `token`: from now on the database refuses it (an API process that checked it in
/// the last few seconds may still accept it until its cache expires). Returns whether a token
/// that was not yet revoked was found.
///
/// # Errors
/// The database's error.
pub async fn revoke_token(conn: &mut PgConnection, token: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE oncebox.api_tokens SET revoked_at = now() WHERE token_hash = $1 AND revoked_at IS NULL",
    )
    .bind(digest(token))
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The caller a token belongs to; `None` for unknown or revoked tokens.
///
/// # Errors
/// The database's error.
pub async fn authenticate(
    conn: &mut PgConnection,
    token: &str,
) -> Result<Option<Caller>, sqlx::Error> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT tenant_id, role FROM oncebox.api_tokens WHERE token_hash = $1 AND revoked_at IS NULL")
            .bind(digest(token))
            .fetch_optional(conn)
            .await?;
    Ok(row.map(|(tenant_id, role)| Caller {
        tenant_id,
        role: if role == "ops" {
            Role::Ops
        } else {
            Role::Agent
        },
    }))
}
