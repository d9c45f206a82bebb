//! Circuit breakers as this worker sees them: the pool-wide state in `oncebox.destination_state`
//! (oncebox_store::breaker), read at most once a second, gates each claimed delivery — send it,
//! defer it without an attempt while its breaker is open, or park it while its destination is
//! disabled — and each outcome of a destination with a breaker is reported: a failure of
//! transport or 5xx class (or a timeout) counts towards opening, an answer closes, a `410 Gone`
//! disables. An operator's disable holds for every destination, with a breaker or without one,
//! of every kind.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use oncebox_core::DeliveryOutcome;
use oncebox_core::config::BreakerSettings;
use oncebox_core::outcome::ErrorCode;
use sqlx::PgPool;
use tokio::time::Instant;

/// How stale the cached states may be.
const FRESH: Duration = Duration::from_secs(1);
/// How long a disabled destination's rows are parked before they are looked at again (unless
/// their deadline comes first). Enabling the destination makes them ready at once
/// (`oncebox_store::breaker::enable`), so the wait only bounds how often a parked backlog is
/// claimed again.
pub(crate) const PARKED_WAIT: Duration = Duration::from_secs(300);
/// The shortest deferral (a probe about to be allowed).
const MIN_WAIT: Duration = Duration::from_millis(200);

/// What to do with one claimed delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Send it.
    Send,
    /// Give the lease back; the row waits this long, without an attempt.
    Defer(Duration),
    /// The destination is disabled: park the row ([`PARKED_WAIT`]) without an attempt.
    Park,
}

#[derive(Debug, Clone)]
struct Cached {
    state: String,
    failures: i32,
    /// When the probe may go (open) or times out (half_open), on this process's clock.
    probe_at: Option<Instant>,
}

#[derive(Default)]
struct Cache {
    read_at: Option<Instant>,
    states: HashMap<String, Cached>,
}

/// This worker's view of the pool's breakers.
#[derive(Default)]
pub(crate) struct Breakers(Mutex<Cache>);

impl Breakers {
    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the states when the cache is older than [`FRESH`]; a failed read keeps the old
    /// view (logged).
    async fn refresh(&self, pool: &PgPool) {
        let now = Instant::now();
        if self.cache().read_at.is_some_and(|at| now - at < FRESH) {
            return;
        }
        match oncebox_store::breaker::states(pool).await {
            Ok(rows) => {
                let mut cache = self.cache();
                cache.read_at = Some(now);
                cache.states = rows
                    .into_iter()
                    .map(|r| {
                        let probe_at = r.probe_in_seconds.map(|s| {
                            if s <= 0.0 {
                                now
                            } else {
                                now + Duration::from_secs_f64(s)
                            }
                        });
                        let cached = Cached {
                            state: r.state,
                            failures: r.failures,
                            probe_at,
                        };
                        (r.destination, cached)
                    })
                    .collect();
            }
            Err(e) => tracing::warn!(error = %e, "reading the circuit breakers failed"),
        }
    }

    /// Whether to send a delivery to `destination` now: disabled → park (whatever the
    /// destination's kind, with a breaker or without); without breaker `settings` → send; closed
    /// → send; open → wait for the cool-down, then one worker in the pool wins the probe and
    /// sends it.
    pub(crate) async fn gate(
        &self,
        pool: &PgPool,
        destination: &str,
        settings: Option<&BreakerSettings>,
    ) -> Gate {
        self.refresh(pool).await;
        let now = Instant::now();
        let Some(cached) = self.cache().states.get(destination).cloned() else {
            return Gate::Send;
        };
        if cached.state == "disabled" {
            return Gate::Park;
        }
        // Without a breaker configured (an open state may be left from a configuration that had
        // one), only a disable holds deliveries back.
        let Some(settings) = settings else {
            return Gate::Send;
        };
        match cached.state.as_str() {
            "closed" => Gate::Send,
            _ => match cached.probe_at {
                Some(at) if at > now => Gate::Defer((at - now).max(MIN_WAIT)),
                _ => {
                    let cool_down = settings.cool_down.get();
                    match oncebox_store::breaker::claim_probe(pool, destination, cool_down).await {
                        Ok(true) => {
                            self.set(destination, "half_open", cached.failures, now + cool_down);
                            tracing::info!(destination, "circuit breaker: sending the probe");
                            Gate::Send
                        }
                        Ok(false) => {
                            // Another worker sends it; look again in a while.
                            self.set(destination, "half_open", cached.failures, now + FRESH);
                            Gate::Defer(FRESH)
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, destination, "claiming the probe failed");
                            Gate::Defer(FRESH)
                        }
                    }
                }
            },
        }
    }

    fn set(&self, destination: &str, state: &str, failures: i32, probe_at: Instant) {
        self.cache().states.insert(
            destination.to_owned(),
            Cached {
                state: state.to_owned(),
                failures,
                probe_at: Some(probe_at),
            },
        );
    }

    /// Reports an outcome of `destination`: a failure of transport or 5xx class (not a 429,
    /// which is a rate limit) counts; a 410 disables; any other answer closes the breaker.
    pub(crate) async fn report(
        &self,
        pool: &PgPool,
        destination: &str,
        settings: &BreakerSettings,
        outcome: &DeliveryOutcome,
    ) {
        let result = match verdict(outcome) {
            Verdict::Failure => {
                let cool_down = settings.cool_down.get();
                let threshold = settings.failures.get();
                match oncebox_store::breaker::failed(pool, destination, threshold, cool_down).await
                {
                    Ok(state) => {
                        if state == "open" {
                            tracing::warn!(destination, "circuit breaker open");
                        }
                        let mut cache = self.cache();
                        let entry = cache
                            .states
                            .entry(destination.to_owned())
                            .or_insert(Cached {
                                state: "closed".into(),
                                failures: 0,
                                probe_at: None,
                            });
                        entry.failures += 1;
                        if state == "open" && entry.state != "open" {
                            entry.probe_at = Some(Instant::now() + cool_down);
                        }
                        entry.state = state;
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            Verdict::Gone => {
                tracing::warn!(destination, "410 Gone: destination disabled");
                let reason = "the destination answered 410 Gone";
                let done = oncebox_store::breaker::disable(pool, destination, reason).await;
                if done.is_ok() {
                    self.set(destination, "disabled", 0, Instant::now());
                }
                done
            }
            Verdict::Answered => {
                let cached = self.cache().states.get(destination).cloned();
                // Only a breaker this worker saw open, or with failures, needs the write.
                if cached.is_none_or(|c| c.state == "closed" && c.failures == 0) {
                    return;
                }
                let done = oncebox_store::breaker::answered(pool, destination).await;
                if let Ok(true) = done {
                    tracing::info!(destination, "circuit breaker closed");
                }
                if done.is_ok() {
                    let mut cache = self.cache();
                    if let Some(c) = cache.states.get_mut(destination)
                        && c.state != "disabled"
                    {
                        c.state = "closed".into();
                        c.failures = 0;
                        c.probe_at = None;
                    }
                }
                done.map(|_| ())
            }
        };
        if let Err(e) = result {
            tracing::warn!(error = %e, destination, "recording a circuit breaker outcome failed");
        }
    }
}

enum Verdict {
    Failure,
    Gone,
    Answered,
}

/// How an outcome counts for the breaker.
fn verdict(outcome: &DeliveryOutcome) -> Verdict {
    let transport = |code: ErrorCode| {
        matches!(
            code,
            ErrorCode::ConnectRefused
                | ErrorCode::Dns
                | ErrorCode::Tls
                | ErrorCode::Timeout
                | ErrorCode::ConnectionReset
                | ErrorCode::StreamIncomplete
        )
    };
    match outcome {
        DeliveryOutcome::Succeeded { .. } => Verdict::Answered,
        DeliveryOutcome::Permanent { error } if error.status_code == Some(410) => Verdict::Gone,
        DeliveryOutcome::RetryBeforeExecution { error, .. }
        | DeliveryOutcome::Unknown { error }
        | DeliveryOutcome::Permanent { error } => match error.status_code {
            Some(429) => Verdict::Answered,
            Some(s) if s >= 500 => Verdict::Failure,
            Some(_) => Verdict::Answered,
            None if transport(error.code) => Verdict::Failure,
            None => Verdict::Answered,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncebox_core::AttemptError;

    fn with(status: Option<u16>, code: ErrorCode) -> AttemptError {
        AttemptError {
            code,
            detail: String::new(),
            status_code: status,
        }
    }

    #[test]
    fn transport_and_5xx_count_a_410_disables_the_rest_is_an_answer() {
        let v = |o: DeliveryOutcome| match verdict(&o) {
            Verdict::Failure => "failure",
            Verdict::Gone => "gone",
            Verdict::Answered => "answered",
        };
        let retry = |s, c| DeliveryOutcome::RetryBeforeExecution {
            error: with(s, c),
            retry_after: None,
        };
        assert_eq!(v(retry(Some(503), ErrorCode::HttpStatus)), "failure");
        assert_eq!(v(retry(None, ErrorCode::ConnectRefused)), "failure");
        assert_eq!(v(retry(Some(429), ErrorCode::HttpStatus)), "answered");
        let unknown = |s, c| DeliveryOutcome::Unknown { error: with(s, c) };
        assert_eq!(v(unknown(None, ErrorCode::Timeout)), "failure");
        assert_eq!(v(unknown(Some(500), ErrorCode::HttpStatus)), "failure");
        assert_eq!(v(unknown(None, ErrorCode::MalformedResponse)), "answered");
        let permanent = |s| DeliveryOutcome::Permanent {
            error: with(s, ErrorCode::HttpStatus),
        };
        assert_eq!(v(permanent(Some(410))), "gone");
        assert_eq!(v(permanent(Some(422))), "answered");
        let ok = DeliveryOutcome::Succeeded {
            status_code: Some(201),
            external_reference: None,
            response: None,
        };
        assert_eq!(v(ok), "answered");
    }
}
