//! Request rates per token and per tenant: token buckets, one per authenticated token and one
//! per tenant, checked together after authentication. A request that finds either bucket empty
//! is answered 429 with `Retry-After` (problem+json) and takes from neither.
//!
//! Only authenticated callers get a bucket, so the number of buckets is bounded by the tokens
//! and tenants in the database; buckets idle long enough to be full again are dropped when the
//! map grows past [`MAX_BUCKETS`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Buckets kept before idle (full) ones are dropped.
pub const MAX_BUCKETS: usize = 100_000;

/// A sustained rate and the burst allowed above it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Requests per second, sustained. 0 turns the limit off.
    pub per_second: f64,
    /// Requests allowed at once after a quiet spell (the bucket's size; at least 1).
    pub burst: f64,
}

impl Rate {
    /// No limit.
    pub const UNLIMITED: Rate = Rate {
        per_second: 0.0,
        burst: 0.0,
    };

    fn limited(self) -> bool {
        self.per_second > 0.0
    }
}

/// The limits of an API process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    /// Per token.
    pub per_token: Rate,
    /// Per tenant, all its tokens together.
    pub per_tenant: Rate,
    /// What one source (a peer address) may ask for before authenticating: the console's login
    /// pages, each of which opens a login form in the database, and its logins.
    pub anonymous: Rate,
    /// What every source together may ask for before authenticating, for the whole process: a
    /// ceiling on the login forms a flood from many addresses can open.
    pub anonymous_total: Rate,
    /// Failed console logins one source may make: once its bucket is empty, that source's
    /// logins are refused (429) until it refills, and no one else's.
    pub failed_logins: Rate,
}

impl Default for RateLimits {
    /// 50 requests/s per token (bursts of 100) and 200/s per tenant (bursts of 400): far above
    /// what an agent's retries need, far below what one process can answer. 5 login pages/s
    /// per source (bursts of 50) and 100/s for all sources together (bursts of 500):
    /// operators log in a few times a day. 10 failed logins per source, then one every 5 s.
    fn default() -> Self {
        RateLimits {
            per_token: Rate {
                per_second: 50.0,
                burst: 100.0,
            },
            per_tenant: Rate {
                per_second: 200.0,
                burst: 400.0,
            },
            anonymous: Rate {
                per_second: 5.0,
                burst: 50.0,
            },
            anonymous_total: Rate {
                per_second: 100.0,
                burst: 500.0,
            },
            failed_logins: Rate {
                per_second: 0.2,
                burst: 10.0,
            },
        }
    }
}

/// Whose bucket.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Owner {
    Token(i64),
    /// A person signed in without a token, by principal.
    Person(String),
    Tenant(String),
    /// Every unauthenticated request together.
    Anonymous,
    /// The unauthenticated requests of one peer address.
    Source(IpAddr),
    /// The failed logins of one peer address.
    Failures(IpAddr),
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    /// The bucket refilled at `rate` up to `now`.
    fn refilled(self, rate: Rate, now: Instant) -> Bucket {
        let burst = rate.burst.max(1.0);
        Bucket {
            tokens: (self.tokens + (now - self.at).as_secs_f64() * rate.per_second).min(burst),
            at: now,
        }
    }

    /// How long until one request fits.
    fn wait(self, rate: Rate) -> Duration {
        Duration::from_secs_f64(((1.0 - self.tokens) / rate.per_second).max(0.0))
    }
}

/// Which limit a refused request hit, and when to try again.
#[derive(Debug, Clone, PartialEq)]
pub enum Refused {
    /// The token's own rate.
    Token(Duration),
    /// The tenant's rate, shared by all its tokens.
    Tenant(Duration),
}

/// The buckets of one API process.
#[derive(Debug)]
pub struct Limiter {
    limits: RateLimits,
    buckets: Mutex<HashMap<Owner, Bucket>>,
}

impl Limiter {
    /// A limiter with `limits`.
    pub fn new(limits: RateLimits) -> Limiter {
        Limiter {
            limits,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one request from token `token_id`'s and tenant `tenant`'s buckets at `now`, or
    /// neither when either is empty.
    ///
    /// # Errors
    /// [`Refused`] naming the limit hit and how long until a request fits.
    pub fn check(&self, token_id: i64, tenant: &str, now: Instant) -> Result<(), Refused> {
        self.check_owner(Owner::Token(token_id), tenant, now)
    }

    /// As [`Limiter::check`], for a person signed in to the console without a token (through
    /// OpenID Connect): their principal has a bucket of its own, at the per-token rate.
    ///
    /// # Errors
    /// As [`Limiter::check`] ([`Refused::Token`] for the person's own bucket).
    pub fn check_person(&self, principal: &str, tenant: &str, now: Instant) -> Result<(), Refused> {
        self.check_owner(Owner::Person(principal.to_owned()), tenant, now)
    }

    fn check_owner(&self, who: Owner, tenant: &str, now: Instant) -> Result<(), Refused> {
        let mut map = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if map.len() > MAX_BUCKETS {
            let limits = self.limits;
            map.retain(|owner, b| {
                let rate = match owner {
                    Owner::Token(_) | Owner::Person(_) => limits.per_token,
                    Owner::Tenant(_) => limits.per_tenant,
                    Owner::Anonymous => limits.anonymous_total,
                    Owner::Source(_) => limits.anonymous,
                    Owner::Failures(_) => limits.failed_logins,
                };
                b.refilled(rate, now).tokens < rate.burst.max(1.0)
            });
        }
        let mut take = |owner: Owner, rate: Rate| -> Result<Option<(Owner, Bucket)>, Duration> {
            if !rate.limited() {
                return Ok(None);
            }
            let full = Bucket {
                tokens: rate.burst.max(1.0),
                at: now,
            };
            let b = map.get(&owner).copied().unwrap_or(full).refilled(rate, now);
            map.insert(owner.clone(), b);
            if b.tokens >= 1.0 {
                Ok(Some((owner, b)))
            } else {
                Err(b.wait(rate))
            }
        };
        let token = take(who, self.limits.per_token).map_err(Refused::Token)?;
        let tenant = take(Owner::Tenant(tenant.to_owned()), self.limits.per_tenant)
            .map_err(Refused::Tenant)?;
        for (owner, mut b) in token.into_iter().chain(tenant) {
            b.tokens -= 1.0;
            map.insert(owner, b);
        }
        Ok(())
    }

    /// Takes one request of `source` at `now` before authentication: from its own bucket and
    /// from every source's together, or from neither when either is empty.
    ///
    /// # Errors
    /// How long until one fits.
    pub fn check_anonymous(&self, source: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut map = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let own = (Owner::Source(source), self.limits.anonymous);
        let all = (Owner::Anonymous, self.limits.anonymous_total);
        let mut taken = Vec::with_capacity(2);
        for (owner, rate) in [own, all] {
            if !rate.limited() {
                continue;
            }
            let b = Self::refilled(&map, &owner, rate, now);
            if b.tokens < 1.0 {
                return Err(b.wait(rate));
            }
            taken.push((owner, b));
        }
        for (owner, mut b) in taken {
            b.tokens -= 1.0;
            map.insert(owner, b);
        }
        Ok(())
    }

    /// Whether `source` may try a login now: refused while its failed logins have emptied its
    /// bucket.
    ///
    /// # Errors
    /// How long until it may try again.
    pub fn check_failures(&self, source: IpAddr, now: Instant) -> Result<(), Duration> {
        let rate = self.limits.failed_logins;
        if !rate.limited() {
            return Ok(());
        }
        let map = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let b = Self::refilled(&map, &Owner::Failures(source), rate, now);
        if b.tokens < 1.0 {
            return Err(b.wait(rate));
        }
        Ok(())
    }

    /// Records a failed login of `source` at `now`.
    pub fn failed(&self, source: IpAddr, now: Instant) {
        let rate = self.limits.failed_logins;
        if !rate.limited() {
            return;
        }
        let mut map = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let owner = Owner::Failures(source);
        let mut b = Self::refilled(&map, &owner, rate, now);
        b.tokens = (b.tokens - 1.0).max(0.0);
        map.insert(owner, b);
    }

    /// `owner`'s bucket at `now` (full when it has none).
    fn refilled(map: &HashMap<Owner, Bucket>, owner: &Owner, rate: Rate, now: Instant) -> Bucket {
        let full = Bucket {
            tokens: rate.burst.max(1.0),
            at: now,
        };
        map.get(owner).copied().unwrap_or(full).refilled(rate, now)
    }

    /// Buckets held (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(token: (f64, f64), tenant: (f64, f64)) -> Limiter {
        let rate = |(per_second, burst)| Rate { per_second, burst };
        Limiter::new(RateLimits {
            per_token: rate(token),
            per_tenant: rate(tenant),
            ..RateLimits::default()
        })
    }

    /// A request its tenant refuses takes nothing from its token's bucket: with a token bucket
    /// that refills a thousandth of a request per second, the token's one request is still
    /// there once the tenant has room again.
    #[test]
    fn a_request_refused_by_its_tenant_takes_nothing_from_its_token() {
        let l = limiter((0.001, 1.0), (1.0, 1.0));
        let t0 = Instant::now();
        assert_eq!(
            l.check(1, "a", t0),
            Ok(()),
            "token 1 spends the tenant's one request"
        );
        assert!(matches!(l.check(2, "a", t0), Err(Refused::Tenant(_))));
        assert!(matches!(l.check(2, "a", t0), Err(Refused::Tenant(_))));
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            l.check(2, "a", later),
            Ok(()),
            "token 2 kept its request through two refusals"
        );
        assert!(
            matches!(
                l.check(2, "a", later + Duration::from_secs(1)),
                Err(Refused::Token(_))
            ),
            "and spent it now: its bucket refills a thousandth a second"
        );
    }

    /// A request its token refuses takes nothing from its tenant's bucket: the tenant's last
    /// request is still there for another token, at the same instant.
    #[test]
    fn a_request_refused_by_its_token_takes_nothing_from_its_tenant() {
        let l = limiter((0.001, 1.0), (0.001, 2.0));
        let t0 = Instant::now();
        assert_eq!(l.check(1, "a", t0), Ok(()));
        for _ in 0..3 {
            assert!(matches!(l.check(1, "a", t0), Err(Refused::Token(_))));
        }
        assert_eq!(l.check(2, "a", t0), Ok(()), "the tenant's second request");
        assert!(matches!(l.check(3, "a", t0), Err(Refused::Tenant(_))));
    }

    /// One source's flood of login pages empties its own bucket, not another source's; all
    /// sources together stop at the process's ceiling, and a refusal takes from neither.
    #[test]
    fn anonymous_requests_are_limited_per_source_under_a_ceiling() {
        let l = Limiter::new(RateLimits {
            anonymous: Rate {
                per_second: 1.0,
                burst: 2.0,
            },
            anonymous_total: Rate {
                per_second: 1.0,
                burst: 4.0,
            },
            ..RateLimits::default()
        });
        let (a, b, c): (IpAddr, IpAddr, IpAddr) = (
            [10, 0, 0, 1].into(),
            [10, 0, 0, 2].into(),
            [10, 0, 0, 3].into(),
        );
        let t0 = Instant::now();
        assert_eq!(l.check_anonymous(a, t0), Ok(()));
        assert_eq!(l.check_anonymous(a, t0), Ok(()));
        for _ in 0..5 {
            assert_eq!(l.check_anonymous(a, t0), Err(Duration::from_secs(1)));
        }
        assert_eq!(l.check_anonymous(b, t0), Ok(()), "another source is served");
        assert_eq!(l.check_anonymous(b, t0), Ok(()));
        assert_eq!(
            l.check_anonymous(c, t0),
            Err(Duration::from_secs(1)),
            "the ceiling of all sources together"
        );
        assert_eq!(l.check_anonymous(a, t0 + Duration::from_secs(1)), Ok(()));
    }

    /// Failed logins slow their own source only, and only once its burst is spent.
    #[test]
    fn failed_logins_slow_only_their_source() {
        let l = Limiter::new(RateLimits {
            failed_logins: Rate {
                per_second: 0.5,
                burst: 3.0,
            },
            ..RateLimits::default()
        });
        let (a, b): (IpAddr, IpAddr) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.check_failures(a, t0), Ok(()));
            l.failed(a, t0);
        }
        assert_eq!(l.check_failures(a, t0), Err(Duration::from_secs(2)));
        assert_eq!(l.check_failures(b, t0), Ok(()), "another source may log in");
        assert_eq!(l.check_failures(a, t0 + Duration::from_secs(2)), Ok(()));
    }

    #[test]
    fn a_token_gets_its_burst_then_its_rate() {
        let l = limiter((2.0, 3.0), (0.0, 0.0));
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.check(1, "a", t0), Ok(()));
        }
        let Err(Refused::Token(wait)) = l.check(1, "a", t0) else {
            panic!("the burst is spent");
        };
        assert_eq!(
            wait,
            Duration::from_millis(500),
            "one request refills in 1/rate"
        );
        assert_eq!(l.check(1, "a", t0 + Duration::from_millis(500)), Ok(()));
        assert!(
            l.check(2, "a", t0).is_ok(),
            "another token has its own bucket"
        );
    }

    #[test]
    fn tokens_of_a_tenant_share_its_bucket_and_a_refusal_takes_nothing() {
        let l = limiter((100.0, 100.0), (1.0, 4.0));
        let t0 = Instant::now();
        for token in [1, 2, 3, 4] {
            assert_eq!(l.check(token, "a", t0), Ok(()));
        }
        assert!(matches!(l.check(5, "a", t0), Err(Refused::Tenant(_))));
        assert_eq!(l.check(6, "b", t0), Ok(()), "another tenant is unaffected");
        // Token 5 was refused by its tenant: its own bucket lost nothing.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(l.check(5, "a", later), Ok(()));
    }

    #[test]
    fn idle_buckets_are_dropped_when_the_map_is_full() {
        let l = limiter((1.0, 1.0), (0.0, 0.0));
        let t0 = Instant::now();
        for id in 0..=MAX_BUCKETS as i64 {
            let _ = l.check(id, "a", t0);
        }
        assert_eq!(l.len(), MAX_BUCKETS + 1);
        let _ = l.check(-1, "a", t0 + Duration::from_secs(2));
        assert_eq!(
            l.len(),
            1,
            "all were full again and went; the new one stays"
        );
    }
}
