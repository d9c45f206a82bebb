//! Who is calling: bearer tokens checked against the database and trusted for a few seconds.
//!
//! The cache keys on the token's SHA-256, never the token itself, and is bounded: when full it
//! drops what has expired and then, if need be, the oldest entry. Unknown tokens are never
//! cached, so a flood of made-up tokens costs a query each but no memory.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use chrono::{DateTime, Utc};
use oncebox_store::tokens::{Caller, Role, authenticate, digest};
use tokio::time::Instant;

use crate::AppState;
use crate::limits::Refused;
use crate::problem::Problem;

/// How long a token, once found valid, is trusted without asking the database again: a revoked
/// token stops working within this time.
pub const TOKEN_CACHE_TTL: Duration = Duration::from_secs(5);

/// Tokens held in the cache at most.
pub const TOKEN_CACHE_CAPACITY: usize = 10_000;

/// Tokens found valid, by their SHA-256, with when they were checked.
#[derive(Default)]
pub(crate) struct TokenCache(Mutex<HashMap<[u8; 32], (Caller, Instant)>>);

impl TokenCache {
    fn map(&self) -> MutexGuard<'_, HashMap<[u8; 32], (Caller, Instant)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The caller of a token checked less than [`TOKEN_CACHE_TTL`] ago that has not expired
    /// since (by the wall clock `wall`).
    fn get(&self, key: &[u8; 32], now: Instant, wall: DateTime<Utc>) -> Option<Caller> {
        self.map()
            .get(key)
            .filter(|(who, at)| {
                now - *at < TOKEN_CACHE_TTL && who.expires_at.is_none_or(|e| e > wall)
            })
            .map(|(who, _)| who.clone())
    }

    /// Remembers a token found valid at `now`, making room when full.
    fn insert(&self, key: [u8; 32], who: Caller, now: Instant) {
        let mut map = self.map();
        if map.len() >= TOKEN_CACHE_CAPACITY && !map.contains_key(&key) {
            map.retain(|_, (_, at)| now - *at < TOKEN_CACHE_TTL);
            if map.len() >= TOKEN_CACHE_CAPACITY
                && let Some(oldest) = map.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| *k)
            {
                map.remove(&oldest);
            }
        }
        map.insert(key, (who, now));
    }

    /// Entries held (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map().len()
    }
}

/// The caller of this request, from its `Authorization: Bearer` token, within its rate limits
/// (429 beyond them).
pub(crate) async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, Problem> {
    let who = authenticated(state, headers).await?;
    state
        .limiter
        .check(who.id, &who.tenant_id, Instant::now())
        .map_err(|refused| {
            let (detail, wait) = match refused {
                Refused::Token(wait) => ("this token is over its request rate", wait),
                Refused::Tenant(wait) => ("this tenant is over its request rate", wait),
            };
            Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("{detail}; retry later"),
            )
            .field("authorization")
            .retry_after(wait)
        })?;
    Ok(who)
}

/// The caller a request's token belongs to (cached for [`TOKEN_CACHE_TTL`]).
async fn authenticated(state: &AppState, headers: &HeaderMap) -> Result<Caller, Problem> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            Problem::new(StatusCode::UNAUTHORIZED, "missing bearer token").field("authorization")
        })?
        .trim();
    let key = digest(token);
    let now = Instant::now();
    if let Some(who) = state.tokens.get(&key, now, Utc::now()) {
        return Ok(who);
    }
    let who = authenticate(&state.pool, token)
        .await
        .map_err(Problem::internal)?
        .ok_or_else(|| {
            Problem::new(
                StatusCode::UNAUTHORIZED,
                "unknown, revoked or expired token",
            )
            .field("authorization")
        })?;
    state.tokens.insert(key, who.clone(), now);
    Ok(who)
}

/// The caller, who must hold an ops token (403 for an agent token).
pub(crate) async fn ops_caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, Problem> {
    let who = caller(state, headers).await?;
    if who.role != Role::Ops {
        return Err(
            Problem::new(StatusCode::FORBIDDEN, "this endpoint needs an ops token")
                .field("authorization"),
        );
    }
    Ok(who)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(tenant: &str) -> Caller {
        Caller {
            id: 1,
            tenant_id: tenant.into(),
            role: Role::Agent,
            expires_at: None,
            label: None,
            holder: None,
        }
    }

    #[test]
    fn the_cache_is_bounded_and_keyed_by_digest() {
        let cache = TokenCache::default();
        let t0 = Instant::now();
        for i in 0..TOKEN_CACHE_CAPACITY + 50 {
            let at = t0 + Duration::from_micros(i as u64);
            cache.insert(digest(&format!("obx_{i}")), who("t"), at);
        }
        assert_eq!(cache.len(), TOKEN_CACHE_CAPACITY, "full, never beyond");
        let late = t0 + Duration::from_secs(1);
        assert!(
            cache.get(&digest("obx_0"), late, Utc::now()).is_none(),
            "the oldest made room"
        );
        let last = format!("obx_{}", TOKEN_CACHE_CAPACITY + 49);
        assert_eq!(cache.get(&digest(&last), late, Utc::now()), Some(who("t")));
        assert!(
            cache
                .get(&digest(&last), late + TOKEN_CACHE_TTL, Utc::now())
                .is_none(),
            "expired after the TTL"
        );
        assert!(
            cache.map().keys().all(|k| k.len() == 32),
            "keys are digests, not tokens"
        );
        // A token that expires is not trusted past its expiry, however fresh the entry.
        let expiring = Caller {
            expires_at: Some(Utc::now() + chrono::TimeDelta::seconds(1)),
            label: None,
            ..who("t")
        };
        cache.insert(digest("obx_expiring"), expiring, late);
        assert!(
            cache
                .get(&digest("obx_expiring"), late, Utc::now())
                .is_some()
        );
        let after = Utc::now() + chrono::TimeDelta::seconds(2);
        assert!(cache.get(&digest("obx_expiring"), late, after).is_none());
    }
}
