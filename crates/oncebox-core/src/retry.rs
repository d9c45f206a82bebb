//! When to try again: exponential backoff with full jitter, Retry-After, attempts and deadline.
//!
//! Pure: the current time and the random source are arguments, so every decision can be
//! reproduced in a test.

use std::time::{Duration, SystemTime};

/// A source of uniformly distributed fractions in `[0, 1)`, used for full jitter.
///
/// Any `FnMut() -> f64` is one; tests pass a fixed sequence, workers a real RNG.
pub trait Jitter {
    /// The next fraction; values outside `[0, 1)` are clamped.
    fn fraction(&mut self) -> f64;
}

impl<F: FnMut() -> f64> Jitter for F {
    fn fraction(&mut self) -> f64 {
        self()
    }
}

/// A receiver's `Retry-After` answer (RFC 9110 §10.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// `Retry-After: 120` — seconds from when the answer was received.
    Delay(Duration),
    /// `Retry-After: Fri, 31 Dec 1999 23:59:59 GMT` — not before this time.
    At(SystemTime),
}

impl RetryAfter {
    /// Parses a header value: delta-seconds or an HTTP-date. `None` for anything else, which
    /// callers treat as if the header were absent.
    pub fn parse(value: &str) -> Option<RetryAfter> {
        let value = value.trim();
        if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            // Absurdly long digit strings saturate rather than fail.
            let secs = value.parse::<u64>().unwrap_or(u64::MAX);
            return Some(RetryAfter::Delay(Duration::from_secs(secs)));
        }
        httpdate::parse_http_date(value).ok().map(RetryAfter::At)
    }

    /// The earliest time this answer allows, given the time it was received.
    pub fn earliest(self, received: SystemTime) -> SystemTime {
        match self {
            RetryAfter::Delay(d) => received.checked_add(d).unwrap_or(far_future(received)),
            RetryAfter::At(t) => t.max(received),
        }
    }
}

fn far_future(now: SystemTime) -> SystemTime {
    now + Duration::from_secs(100 * 365 * 24 * 3600)
}

/// How a destination retries attempts that definitely did not execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; at least 1.
    pub max_attempts: u32,
    /// The backoff cap before the first retry; doubled for each further one.
    pub initial_delay: Duration,
    /// The largest backoff (a receiver's Retry-After may ask for longer and is honoured).
    pub max_delay: Duration,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again, not before this time.
    RetryAt(SystemTime),
    /// Stop: the intent ends `failed` (attempts) or `expired` (deadline).
    GiveUp(GiveUpReason),
}

/// Why no further attempt will be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveUpReason {
    /// `max_attempts` attempts were made.
    AttemptsExhausted,
    /// The next attempt could not start before the intent's deadline.
    DeadlineReached,
}

/// A policy that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPolicy {
    /// `max_attempts` is zero.
    #[error("max_attempts must be at least 1")]
    NoAttempts,
    /// `initial_delay` is larger than `max_delay`.
    #[error("initial_delay ({initial:?}) must not exceed max_delay ({max:?})")]
    InitialAboveMax {
        /// The initial delay.
        initial: Duration,
        /// The maximum delay.
        max: Duration,
    },
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Checks that the policy can be followed.
    ///
    /// # Errors
    /// [`InvalidPolicy`] naming the broken constraint.
    pub fn validate(&self) -> Result<(), InvalidPolicy> {
        if self.max_attempts == 0 {
            return Err(InvalidPolicy::NoAttempts);
        }
        if self.initial_delay > self.max_delay {
            return Err(InvalidPolicy::InitialAboveMax {
                initial: self.initial_delay,
                max: self.max_delay,
            });
        }
        Ok(())
    }

    /// The backoff cap before retry number `retry` (1 for the first retry):
    /// `min(max_delay, initial_delay × 2^(retry-1))`.
    pub fn backoff_cap(&self, retry: u32) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial_delay
            .checked_mul(factor)
            .map_or(self.max_delay, |d| d.min(self.max_delay))
    }

    /// Full jitter: a delay drawn uniformly from `[0, backoff_cap(retry)]`.
    pub fn backoff(&self, retry: u32, jitter: &mut impl Jitter) -> Duration {
        let f = jitter.fraction();
        let f = if f.is_finite() {
            f.clamp(0.0, 1.0)
        } else {
            0.0
        };
        self.backoff_cap(retry).mul_f64(f)
    }

    /// Decides whether and when to make the next attempt after `attempts_made` attempts, the
    /// last one answered at `now`.
    ///
    /// The delay is `max(Retry-After, full-jitter backoff)`: a receiver's Retry-After is honoured
    /// even beyond `max_delay`. No attempt is scheduled at or after `deadline`.
    pub fn next_attempt(
        &self,
        attempts_made: u32,
        now: SystemTime,
        retry_after: Option<RetryAfter>,
        deadline: Option<SystemTime>,
        jitter: &mut impl Jitter,
    ) -> RetryDecision {
        if attempts_made >= self.max_attempts {
            return RetryDecision::GiveUp(GiveUpReason::AttemptsExhausted);
        }
        let backoff_at = now
            .checked_add(self.backoff(attempts_made, jitter))
            .unwrap_or(far_future(now));
        let at = retry_after.map_or(backoff_at, |ra| ra.earliest(now).max(backoff_at));
        match deadline {
            Some(deadline) if at >= deadline => {
                RetryDecision::GiveUp(GiveUpReason::DeadlineReached)
            }
            _ => RetryDecision::RetryAt(at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000)
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        }
    }

    #[test]
    fn cap_doubles_until_max_delay() {
        let p = policy();
        let caps: Vec<_> = (1..=6).map(|r| p.backoff_cap(r).as_millis()).collect();
        assert_eq!(caps, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(p.backoff_cap(200), Duration::from_secs(1), "no overflow");
    }

    #[test]
    fn full_jitter_spans_zero_to_cap() {
        let p = policy();
        assert_eq!(p.backoff(3, &mut || 0.0), Duration::ZERO);
        assert_eq!(p.backoff(3, &mut || 0.5), Duration::from_millis(200));
        assert_eq!(p.backoff(3, &mut || 1.0), Duration::from_millis(400));
        assert_eq!(
            p.backoff(3, &mut || 7.0),
            Duration::from_millis(400),
            "clamped"
        );
        assert_eq!(p.backoff(3, &mut || f64::NAN), Duration::ZERO);
        let mut seq = [0.25, 0.75].into_iter().cycle();
        let mut j = move || seq.next().unwrap_or(0.0);
        assert_eq!(p.backoff(1, &mut j), Duration::from_millis(25));
        assert_eq!(p.backoff(1, &mut j), Duration::from_millis(75));
    }

    #[test]
    fn retries_until_attempts_are_exhausted() {
        let p = policy();
        for made in 1..5 {
            assert!(matches!(
                p.next_attempt(made, t0(), None, None, &mut || 0.5),
                RetryDecision::RetryAt(_)
            ));
        }
        assert_eq!(
            p.next_attempt(5, t0(), None, None, &mut || 0.5),
            RetryDecision::GiveUp(GiveUpReason::AttemptsExhausted)
        );
    }

    #[test]
    fn retry_after_takes_precedence_even_beyond_max_delay() {
        let p = policy();
        let d = RetryAfter::parse("30").expect("delta seconds");
        assert_eq!(
            p.next_attempt(1, t0(), Some(d), None, &mut || 1.0),
            RetryDecision::RetryAt(t0() + Duration::from_secs(30))
        );
        // A Retry-After shorter than the drawn backoff does not shorten it.
        let short = RetryAfter::Delay(Duration::from_millis(10));
        assert_eq!(
            p.next_attempt(1, t0(), Some(short), None, &mut || 1.0),
            RetryDecision::RetryAt(t0() + Duration::from_millis(100))
        );
    }

    #[test]
    fn retry_after_http_date() {
        let at = RetryAfter::parse("Tue, 14 Nov 2023 22:13:50 GMT").expect("http date");
        assert_eq!(
            at,
            RetryAfter::At(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_030))
        );
        assert_eq!(
            policy().next_attempt(1, t0(), Some(at), None, &mut || 0.0),
            RetryDecision::RetryAt(t0() + Duration::from_secs(30))
        );
        // A date in the past means "now" (plus backoff), never earlier.
        let past = RetryAfter::parse("Sun, 06 Nov 1994 08:49:37 GMT").expect("http date");
        assert_eq!(past.earliest(t0()), t0());
    }

    #[test]
    fn retry_after_garbage_is_ignored() {
        for v in ["", "soon", "-5", "1.5", "Tue, 99 Nov 2023"] {
            assert_eq!(RetryAfter::parse(v), None, "{v:?}");
        }
        assert_eq!(
            RetryAfter::parse(" 7 "),
            Some(RetryAfter::Delay(Duration::from_secs(7)))
        );
        assert!(RetryAfter::parse("99999999999999999999999").is_some());
    }

    #[test]
    fn deadline_stops_retries() {
        let p = policy();
        let deadline = t0() + Duration::from_millis(150);
        assert_eq!(
            p.next_attempt(1, t0(), None, Some(deadline), &mut || 1.0),
            RetryDecision::RetryAt(t0() + Duration::from_millis(100))
        );
        assert_eq!(
            p.next_attempt(2, t0(), None, Some(deadline), &mut || 1.0),
            RetryDecision::GiveUp(GiveUpReason::DeadlineReached)
        );
        let ra = RetryAfter::Delay(Duration::from_secs(1));
        assert_eq!(
            p.next_attempt(1, t0(), Some(ra), Some(deadline), &mut || 0.0),
            RetryDecision::GiveUp(GiveUpReason::DeadlineReached)
        );
    }

    #[test]
    fn validate() {
        assert_eq!(policy().validate(), Ok(()));
        assert_eq!(RetryPolicy::default().validate(), Ok(()));
        let mut p = policy();
        p.max_attempts = 0;
        assert_eq!(p.validate(), Err(InvalidPolicy::NoAttempts));
        let mut p = policy();
        p.initial_delay = Duration::from_secs(5);
        assert!(matches!(
            p.validate(),
            Err(InvalidPolicy::InitialAboveMax { .. })
        ));
    }
}
