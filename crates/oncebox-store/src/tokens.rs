//! API bearer tokens: random, shown once, stored as SHA-256 hex, scoped to a tenant and a role,
//! with an optional label and expiry; when each was last used is kept to within a minute.

use std::time::Duration;

use chrono::{DateTime, Utc};
use oncebox_core::Principal;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::{FromRow, PgExecutor};

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
    /// The token's id (what rate limits and `oncebox ops token` name it by).
    pub id: i64,
    /// The tenant every query is scoped to.
    pub tenant_id: String,
    /// What it may do.
    pub role: Role,
    /// When the token stops working, if ever.
    pub expires_at: Option<DateTime<Utc>>,
    /// The token's label, naming it for people (the audit log shows it beside the id).
    pub label: Option<String>,
    /// Whom the token was issued to, if it names them: every token of one holder is one
    /// principal.
    pub holder: Option<String>,
}

impl Caller {
    /// Who this caller is: its holder's principal when the token names one
    /// ([`Principal::of_holder`]: `user:HOLDER`, or the OpenID principal it names), else
    /// `token:ID`.
    pub fn principal(&self) -> Principal {
        match &self.holder {
            Some(holder) => Principal::of_holder(holder),
            None => Principal::Token(self.id),
        }
    }

    /// This caller as the actor of a decision through `via`: its principal, with the token's
    /// label.
    pub fn actor(&self, via: &str) -> crate::ops::Actor {
        crate::ops::Actor::new(self.principal().to_string(), self.role.as_str(), via)
            .with_label(self.label.as_deref())
    }
}

/// A token as `oncebox ops token list` shows it: never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, FromRow)]
pub struct TokenInfo {
    /// Its id.
    pub id: i64,
    /// Its tenant.
    pub tenant_id: String,
    /// Its role.
    pub role: Role,
    /// Its label, if one was given.
    pub label: Option<String>,
    /// Whom it was issued to, if it names them.
    pub holder: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it stops working, if ever.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was last used (to within a minute), if ever.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Which tokens to revoke.
#[derive(Debug, Clone, Copy)]
pub enum Revoke<'a> {
    /// The one with this secret.
    Token(&'a str),
    /// The one with this id.
    Id(i64),
    /// Every live one with this label.
    Label(&'a str),
}

/// The SHA-256 of a token, as stored (and as the API's cache keys it): a token is never kept.
pub fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn digest_hex(token: &str) -> String {
    hex::encode(digest(token))
}

/// What a new token is.
#[derive(Debug, Clone, Copy)]
pub struct NewToken<'a> {
    /// The tenant it is scoped to.
    pub tenant: &'a str,
    /// What it may do.
    pub role: Role,
    /// A name for people, if any.
    pub label: Option<&'a str>,
    /// Whom it is issued to (checked with [`oncebox_core::principal::check_name`] by the
    /// caller), if it names them: its principal is then `user:HOLDER`, else `token:ID`.
    pub holder: Option<&'a str>,
    /// How long it lives; `None`: until revoked.
    pub lifetime: Option<Duration>,
}

impl<'a> NewToken<'a> {
    /// A token of `tenant` with `role`, without label, holder or expiry.
    pub fn new(tenant: &'a str, role: Role) -> NewToken<'a> {
        NewToken {
            tenant,
            role,
            label: None,
            holder: None,
            lifetime: None,
        }
    }
}

/// Creates the token `new` describes; returns its id and the token, which is never stored.
///
/// # Errors
/// The database's error, or the OS random source failing.
pub async fn create_token(
    db: impl PgExecutor<'_>,
    new: NewToken<'_>,
) -> Result<(i64, String), sqlx::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| sqlx::Error::Protocol(format!("no randomness for a token: {e}")))?;
    let token = format!("obx_{}", hex::encode(bytes));
    let id = sqlx::query_scalar(crate::sql::TOKEN_CREATE)
        .bind(new.tenant)
        .bind(new.role)
        .bind(digest_hex(&token))
        .bind(new.label)
        .bind(new.lifetime.map(|d| d.as_secs_f64()))
        .bind(new.holder)
        .fetch_one(db)
        .await?;
    Ok((id, token))
}

/// Revokes the live tokens `which` names: from now on the database refuses them (an API
/// process that checked one in the last few seconds may still accept it until its cache
/// expires). Returns the ids revoked (none when nothing live matched).
///
/// # Errors
/// The database's error.
pub async fn revoke(db: impl PgExecutor<'_>, which: Revoke<'_>) -> Result<Vec<i64>, sqlx::Error> {
    let (hash, id, label) = match which {
        Revoke::Token(t) => (Some(digest_hex(t)), None, None),
        Revoke::Id(i) => (None, Some(i), None),
        Revoke::Label(l) => (None, None, Some(l)),
    };
    sqlx::query_scalar(crate::sql::TOKEN_REVOKE)
        .bind(hash)
        .bind(id)
        .bind(label)
        .fetch_all(db)
        .await
}

/// The tokens of `tenant` (or all), newest first; with `all`, revoked and expired ones too.
///
/// # Errors
/// The database's error.
pub async fn list(
    db: impl PgExecutor<'_>,
    tenant: Option<&str>,
    all: bool,
) -> Result<Vec<TokenInfo>, sqlx::Error> {
    sqlx::query_as(crate::sql::TOKEN_LIST)
        .bind(tenant)
        .bind(all)
        .fetch_all(db)
        .await
}

/// The caller a token belongs to; `None` for unknown, revoked or expired tokens. Marks the
/// token used (at most once a minute).
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
