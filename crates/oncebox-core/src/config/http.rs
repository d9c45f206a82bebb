//! `kind = "http"`: an HTTP endpoint, with its own signing, circuit breaker and request rate.

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroUsize};

use serde::Deserialize;

use super::defaults;
use super::{
    ConfigError, HeaderName, HeaderValue, HttpStatus, HttpUrl, IdempotencyMode, JsonPointer,
    LookupSettings, OrderingSettings, RetrySettings, check_lookup,
};
use crate::duration::{HumanDuration, NonZeroDuration};

/// An HTTP destination (`kind = "http"`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// The endpoint: `http://` or `https://`.
    pub url: HttpUrl,
    /// The HTTP method (default POST).
    #[serde(default)]
    pub method: HttpMethod,
    /// How the receiver treats repeated keys.
    pub idempotency: IdempotencyMode,
    /// Extra request headers; values may read the environment with `${NAME}`. Never logged.
    #[serde(default)]
    pub headers: BTreeMap<HeaderName, HeaderValue>,
    /// Timeout of one request, from sending to the whole answer (default "10s"). Always shorter
    /// than the worker's lease.
    #[serde(default = "defaults::timeout")]
    pub timeout: NonZeroDuration,
    /// Retry policy for attempts that definitely did not execute.
    #[serde(default)]
    pub retry: RetrySettings,
    /// How long after dispatch a lookup that finds nothing may still be behind (default "60s");
    /// only then is the intent re-issued.
    #[serde(default = "defaults::consistency_window")]
    pub consistency_window: HumanDuration,
    /// JSON pointer to the external reference in a successful answer, such as "/id".
    pub reference_pointer: Option<JsonPointer>,
    /// For `text/event-stream` answers: the event name that marks completion. A stream that
    /// ends without it is an unknown outcome.
    pub completion_event: Option<String>,
    /// Statuses to treat as "definitely not executed, retry" instead of the defaults.
    pub retry_statuses: Option<Vec<HttpStatus>>,
    /// Statuses to treat as "permanent failure" instead of the defaults.
    pub permanent_statuses: Option<Vec<HttpStatus>>,
    /// Deliveries in flight to this destination at once, per worker (default: no extra limit).
    pub max_in_flight: Option<NonZeroUsize>,
    /// Per-key ordering lanes' policy for a head that fails (`[destinations.X.ordering]`; lanes
    /// block by default).
    #[serde(default)]
    pub ordering: OrderingSettings,
    /// Reconciliation lookup; required for `idempotency = "lookup"`.
    pub lookup: Option<LookupSettings>,
    /// Standard Webhooks signatures on every request and lookup (none when absent).
    pub signing: Option<SigningSettings>,
    /// A circuit breaker held for the whole pool (none when absent).
    pub breaker: Option<BreakerSettings>,
    /// A request rate held for the whole pool (none when absent).
    pub rate_limit: Option<RateLimitSettings>,
}

/// The HTTP method used to deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// POST (the default).
    #[default]
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
}

impl HttpMethod {
    /// The method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
        }
    }
}

/// A destination's request rate for the whole pool (`[destinations.X.rate_limit]`), a token
/// bucket in Postgres: at most `per_second` requests a second on average, `burst` at once after
/// a quiet spell. Deliveries over the limit wait without spending an attempt. A 429 or 503 with
/// `Retry-After` pauses the destination for every worker until then.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSettings {
    /// Requests per second, on average (more than zero).
    pub per_second: f64,
    /// Requests at once after a quiet spell (default: a tenth of a second's worth, at least 1).
    pub burst: Option<NonZeroU32>,
}

impl RateLimitSettings {
    /// The bucket's size.
    pub fn burst(&self) -> f64 {
        self.burst
            .map_or((self.per_second / 10.0).max(1.0), |b| f64::from(b.get()))
    }
}

/// A destination's circuit breaker (`[destinations.X.breaker]`), held in Postgres for the whole
/// pool: after `failures` attempts in a row that failed at the transport or with a 5xx (or timed
/// out), the destination opens — workers stop sending to it and its intents wait queued — and
/// after `cool_down` one probe is let through; a success closes it. A `410 Gone` disables it
/// until an operator enables it (`oncebox ops destinations enable NAME`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerSettings {
    /// Failures in a row that open the breaker (default 5).
    #[serde(default = "defaults::breaker_failures")]
    pub failures: NonZeroU32,
    /// How long it stays open before one probe goes through (default "30s").
    #[serde(default = "defaults::cool_down")]
    pub cool_down: NonZeroDuration,
}

/// Standard Webhooks signing of an HTTP destination's requests (`[destinations.X.signing]`):
/// `webhook-id` (the idempotency key), `webhook-timestamp`, and one `webhook-signature` entry
/// per secret over `id.timestamp.body`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningSettings {
    /// The secrets, usually `${NAME}` of the environment: `whsec_…` (HMAC-SHA256, `v1`) or
    /// `whsk_…` (Ed25519, `v1a`). Several at once during a rotation: every one signs. Never
    /// logged.
    pub secrets: Vec<HeaderValue>,
}

impl HttpConfig {
    /// What the field types cannot check: the lookup, the signing secrets, the rate.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        check_lookup(self.lookup.as_ref(), self.idempotency)?;
        if let Some(s) = &self.signing
            && s.secrets.is_empty()
        {
            return Err(ConfigError::new(
                "signing.secrets",
                "name at least one secret (whsec_… or whsk_…)",
            ));
        }
        if let Some(r) = &self.rate_limit
            && !(r.per_second.is_finite() && r.per_second > 0.0)
        {
            return Err(ConfigError::new(
                "rate_limit.per_second",
                format!(
                    "must be a number of requests above zero, not {}",
                    r.per_second
                ),
            ));
        }
        Ok(())
    }
}
