//! The operator's configuration file (TOML): which actions exist, where each one goes, and what
//! is redacted. Parsing is strict and typed: a destination is an HTTP or an AMQP destination
//! (`kind`), each with only its own fields; durations, counts, URLs and JSON pointers are types
//! that refuse bad values where they are read. An unknown field or a bad value stops start-up
//! with a message that names the field (`destinations.billing.timeout: "0s": must be more than
//! zero`).
//!
//! ```toml
//! [actions.create_invoice]
//! destination = "billing"
//! redact = [{ pointer = "/card/number", mode = "hash" }]
//!
//! [destinations.billing]
//! kind = "http"
//! url = "https://billing.internal/invoices"
//! idempotency = "key"
//! ```

mod errors;
mod types;

use std::collections::BTreeMap;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use serde::Deserialize;

use crate::duration::{HumanDuration, NonZeroDuration};
use crate::key::validate_token;
use crate::redact::RedactRule;
use crate::retry::RetryPolicy;
use crate::schema::ArgumentsSchema;

pub use errors::ConfigError;
pub use types::{HeaderName, HeaderValue, HttpStatus, HttpUrl, JsonPointer};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Action name → what it does. Agents name actions, never URLs.
    #[serde(default)]
    pub actions: BTreeMap<String, Action>,
    /// Destination name → how to reach it.
    #[serde(default)]
    pub destinations: BTreeMap<String, Destination>,
}

/// One action an agent may request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// The destination (a key of `[destinations]`) that carries out this action.
    pub destination: String,
    /// Redaction rules applied to the arguments before they are stored or logged.
    #[serde(default)]
    pub redact: Vec<RedactRule>,
    /// A JSON Schema the arguments must match, on every intake path (and the MCP tool's
    /// `inputSchema`). Written as a TOML table: `[actions.X.arguments_schema]`.
    #[serde(default)]
    pub arguments_schema: Option<ArgumentsSchema>,
    /// Offer the action as an MCP tool (`oncebox mcp`, `/mcp`): `[actions.X.tool]`.
    #[serde(default)]
    pub tool: Option<ToolSettings>,
}

/// How an action is offered as an MCP tool. Its `inputSchema` is the action's
/// `arguments_schema` (any object when it has none).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSettings {
    /// What the tool does, for the model choosing it. Required.
    pub description: String,
    /// A human-readable title.
    #[serde(default)]
    pub title: Option<String>,
    /// Whether the action may destroy or overwrite something (MCP's `destructiveHint`;
    /// default true). A call is always idempotent — the same key never acts twice — so
    /// `idempotentHint` is always true.
    #[serde(default = "defaults::yes")]
    pub destructive: bool,
    /// The arguments that identify a call (`key = ["/order_id", "/amount"]`, JSON pointers into
    /// them): a call that names no key and no run is the same intent as an earlier one whose
    /// values there are equal, within [`ToolSettings::dedupe_window`]. Default: all the
    /// arguments.
    #[serde(default)]
    pub key: Option<Vec<JsonPointer>>,
    /// How long a call that names no key and no run is the same intent as an identical one
    /// before it (`dedupe_window = "24h"`, the default); after it, a new intent.
    #[serde(default = "defaults::dedupe_window")]
    pub dedupe_window: NonZeroDuration,
}

impl ToolSettings {
    /// The identity of a call of tool `tool` with `arguments` that names no key and no run:
    /// the tool and its identifying arguments ([`ToolSettings::key`]), for the dedupe window.
    ///
    /// # Errors
    /// The field (`arguments/order_id`) an identifying argument is missing from, and why.
    pub fn identity(
        &self,
        tool: &str,
        arguments: &serde_json::Value,
    ) -> Result<crate::key::CallIdentity, (String, String)> {
        let pointers: Option<Vec<&str>> = self
            .key
            .as_ref()
            .map(|k| k.iter().map(JsonPointer::as_str).collect());
        crate::key::CallIdentity::of(
            tool,
            arguments,
            pointers.as_deref(),
            self.dedupe_window.get(),
        )
    }
}

/// How a destination treats a repeated idempotency key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyMode {
    /// The receiver honours `Idempotency-Key`: re-sending with the same key is safe.
    Key,
    /// The receiver does not honour keys but effects can be looked up by key.
    Lookup,
    /// Neither: any unknown outcome needs a person.
    None,
}

impl IdempotencyMode {
    /// True when a re-send with the same key cannot create a second effect.
    pub fn honours_keys(self) -> bool {
        self == IdempotencyMode::Key
    }
}

/// An AMQP destination's idempotency: always `key` — consumers deduplicate on `message_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AmqpIdempotency {
    /// Consumers deduplicate on the message id (the idempotency key).
    #[default]
    Key,
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

/// Retry policy settings of a destination; see [`crate::retry::RetryPolicy`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    /// Attempts in all, the first included (default 8).
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: NonZeroU32,
    /// Backoff cap before the first retry, doubled after each (default "500ms").
    #[serde(default = "defaults::initial_delay")]
    pub initial_delay: HumanDuration,
    /// Largest backoff (default "60s"); a receiver's Retry-After may ask for longer.
    #[serde(default = "defaults::max_delay")]
    pub max_delay: HumanDuration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: defaults::max_attempts(),
            initial_delay: defaults::initial_delay(),
            max_delay: defaults::max_delay(),
        }
    }
}

impl RetrySettings {
    /// The policy these settings describe.
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts.get(),
            initial_delay: self.initial_delay.get(),
            max_delay: self.max_delay.get(),
        }
    }
}

/// How to look an effect up at the destination by key (reconciliation).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupSettings {
    /// A GET URL template with `{key}` and/or `{external_reference}`.
    pub url: HttpUrl,
    /// JSON pointer to the list of objects found, in the lookup's answer ("" for the root).
    #[serde(default)]
    pub results_pointer: JsonPointer,
    /// Fields (JSON pointers into each found object and into the intent's arguments) that must
    /// agree for a match to count.
    #[serde(default)]
    pub fields: Vec<JsonPointer>,
    /// JSON pointer to the external reference inside a found object.
    pub reference_pointer: Option<JsonPointer>,
    /// Timeout of one lookup request (default "5s").
    #[serde(default = "defaults::lookup_timeout")]
    pub timeout: NonZeroDuration,
    /// Request headers of the lookup; values may read the environment with `${NAME}`. Never
    /// logged. When absent, the lookup sends the destination's own `headers` (the same
    /// credentials as a delivery); `{}` sends none.
    pub headers: Option<BTreeMap<HeaderName, HeaderValue>>,
}

/// A receiver of intents: its transport decides which fields it has.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Destination {
    /// An HTTP endpoint.
    Http(Box<HttpConfig>),
    /// A RabbitMQ exchange (AMQP 0-9-1), with publisher confirms.
    Amqp(AmqpConfig),
    /// A tool on an upstream MCP server, called over streamable HTTP.
    Mcp(Box<McpConfig>),
}

/// An MCP destination (`kind = "mcp"`): each attempt is one `tools/call` on an upstream MCP
/// server over streamable HTTP, with the idempotency key in the call's `_meta`
/// (`oncebox.dev/idempotency_key`). Classified as HTTP is: nothing sent → retry; sent and no
/// answer → unknown; a result with `isError` → permanent failure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The server's streamable HTTP endpoint (`http://` or `https://`, such as
    /// `https://tools.internal/mcp`).
    pub url: HttpUrl,
    /// The upstream tool to call; default: the action's name.
    pub tool: Option<String>,
    /// How the upstream tool treats a repeated key in `_meta`.
    pub idempotency: IdempotencyMode,
    /// Extra request headers (credentials); values may read the environment with `${NAME}`.
    /// Never logged.
    #[serde(default)]
    pub headers: BTreeMap<HeaderName, HeaderValue>,
    /// Timeout of one call, from sending to the whole answer (default "10s").
    #[serde(default = "defaults::timeout")]
    pub timeout: NonZeroDuration,
    /// Retry policy for calls that definitely did not execute.
    #[serde(default)]
    pub retry: RetrySettings,
    /// How long after dispatch a lookup that finds nothing may still be behind (default "60s").
    #[serde(default = "defaults::consistency_window")]
    pub consistency_window: HumanDuration,
    /// JSON pointer to the external reference in the result's `structuredContent`.
    pub reference_pointer: Option<JsonPointer>,
    /// Deliveries in flight to this destination at once, per worker (default: no extra limit).
    pub max_in_flight: Option<NonZeroUsize>,
    /// Per-key ordering lanes' policy for a head that fails (`[destinations.X.ordering]`; lanes
    /// block by default).
    #[serde(default)]
    pub ordering: OrderingSettings,
    /// Reconciliation lookup over HTTP; required for `idempotency = "lookup"`.
    pub lookup: Option<LookupSettings>,
    /// Upstream tools that change nothing, offered by the MCP gateway as they are and called
    /// directly — no intent, no journal. List only tools that are read-only.
    #[serde(default)]
    pub read_only_tools: Vec<String>,
}

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

/// What a destination's ordering lanes do when their head ends `failed`, `expired` or
/// `needs_review` (`[destinations.X.ordering]`). Lanes exist only for intents submitted with an
/// `ordering_key`: those of one tenant, destination and key are delivered one at a time in
/// submit order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderingSettings {
    /// `"block"` (the default: the lane waits for an operator to retry, resolve or skip the
    /// head) or `"skip"` (the lane goes on with the next intent).
    #[serde(default)]
    pub on_failure: LaneFailure,
}

/// See [`OrderingSettings::on_failure`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneFailure {
    /// The lane waits for an operator.
    #[default]
    Block,
    /// The lane goes on with the next intent.
    Skip,
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

/// An AMQP destination (`kind = "amqp"`): publishes to an exchange with publisher confirms.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpConfig {
    /// The broker URL (may read the environment with `${NAME}`); default `AMQP_URL`.
    pub amqp_url: Option<HeaderValue>,
    /// The exchange to publish to ("" is the default exchange).
    #[serde(default)]
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
    /// Always `key`: consumers deduplicate on the message id.
    #[serde(default)]
    pub idempotency: AmqpIdempotency,
    /// Publish as mandatory, so an unroutable message comes back and the intent fails (default
    /// true).
    #[serde(default = "defaults::yes")]
    pub mandatory: bool,
    /// Unconfirmed messages allowed in flight on the channel (default 256).
    #[serde(default = "defaults::max_unconfirmed")]
    pub max_unconfirmed: NonZeroUsize,
    /// How long a publish may wait for its confirm (default "10s").
    #[serde(default = "defaults::timeout")]
    pub timeout: NonZeroDuration,
    /// Retry policy for publishes that definitely did not go out.
    #[serde(default)]
    pub retry: RetrySettings,
    /// Deliveries in flight to this destination at once, per worker (default: no extra limit).
    pub max_in_flight: Option<NonZeroUsize>,
    /// Per-key ordering lanes' policy for a head that fails (`[destinations.X.ordering]`; lanes
    /// block by default).
    #[serde(default)]
    pub ordering: OrderingSettings,
}

impl Destination {
    /// How the receiver treats repeated keys (AMQP destinations honour them by contract).
    pub fn idempotency(&self) -> IdempotencyMode {
        match self {
            Destination::Http(h) => h.idempotency,
            Destination::Amqp(_) => IdempotencyMode::Key,
            Destination::Mcp(m) => m.idempotency,
        }
    }

    /// One request's (or confirm's) timeout.
    pub fn timeout(&self) -> Duration {
        match self {
            Destination::Http(h) => h.timeout.get(),
            Destination::Amqp(a) => a.timeout.get(),
            Destination::Mcp(m) => m.timeout.get(),
        }
    }

    /// The retry settings.
    pub fn retry(&self) -> &RetrySettings {
        match self {
            Destination::Http(h) => &h.retry,
            Destination::Amqp(a) => &a.retry,
            Destination::Mcp(m) => &m.retry,
        }
    }

    /// The per-worker in-flight limit, if any.
    pub fn max_in_flight(&self) -> Option<NonZeroUsize> {
        match self {
            Destination::Http(h) => h.max_in_flight,
            Destination::Amqp(a) => a.max_in_flight,
            Destination::Mcp(m) => m.max_in_flight,
        }
    }

    /// What its ordering lanes do when their head fails.
    pub fn ordering(&self) -> OrderingSettings {
        match self {
            Destination::Http(h) => h.ordering,
            Destination::Amqp(a) => a.ordering,
            Destination::Mcp(m) => m.ordering,
        }
    }

    /// The circuit breaker, if configured (HTTP destinations).
    pub fn breaker(&self) -> Option<&BreakerSettings> {
        match self {
            Destination::Http(h) => h.breaker.as_ref(),
            Destination::Amqp(_) | Destination::Mcp(_) => None,
        }
    }

    /// The pool-wide request rate, if configured (HTTP destinations).
    pub fn rate_limit(&self) -> Option<&RateLimitSettings> {
        match self {
            Destination::Http(h) => h.rate_limit.as_ref(),
            Destination::Amqp(_) | Destination::Mcp(_) => None,
        }
    }

    /// The reconciliation lookup, if any (AMQP destinations have none).
    pub fn lookup(&self) -> Option<&LookupSettings> {
        match self {
            Destination::Http(h) => h.lookup.as_ref(),
            Destination::Amqp(_) => None,
            Destination::Mcp(m) => m.lookup.as_ref(),
        }
    }

    /// How long a lookup that finds nothing may lag behind the dispatch.
    pub fn consistency_window(&self) -> Duration {
        match self {
            Destination::Http(h) => h.consistency_window.get(),
            Destination::Amqp(_) => Duration::ZERO,
            Destination::Mcp(m) => m.consistency_window.get(),
        }
    }
}

/// The defaults of every optional setting, in one place.
mod defaults {
    use super::*;

    pub(super) fn max_attempts() -> NonZeroU32 {
        NonZeroU32::new(8).unwrap_or(NonZeroU32::MIN)
    }
    pub(super) fn initial_delay() -> HumanDuration {
        HumanDuration(Duration::from_millis(500))
    }
    pub(super) fn max_delay() -> HumanDuration {
        HumanDuration(Duration::from_secs(60))
    }
    pub(super) fn timeout() -> NonZeroDuration {
        NonZeroDuration::from_secs(10)
    }
    pub(super) fn lookup_timeout() -> NonZeroDuration {
        NonZeroDuration::from_secs(5)
    }
    pub(super) fn consistency_window() -> HumanDuration {
        HumanDuration(Duration::from_secs(60))
    }
    pub(super) fn max_unconfirmed() -> NonZeroUsize {
        NonZeroUsize::new(256).unwrap_or(NonZeroUsize::MIN)
    }
    pub(super) fn yes() -> bool {
        true
    }
    pub(super) fn dedupe_window() -> NonZeroDuration {
        NonZeroDuration::new(crate::key::DEFAULT_DEDUPE_WINDOW)
            .unwrap_or(NonZeroDuration::from_secs(1))
    }
    pub(super) fn breaker_failures() -> NonZeroU32 {
        NonZeroU32::new(5).unwrap_or(NonZeroU32::MIN)
    }
    pub(super) fn cool_down() -> NonZeroDuration {
        NonZeroDuration::from_secs(30)
    }
}

impl Config {
    /// Parses and validates a TOML document.
    ///
    /// # Errors
    /// [`ConfigError`] for syntax errors, unknown fields, bad values and dangling references,
    /// naming the field (its dotted path) or, for a syntax error, the line and column.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| errors::from_toml(text, &e))?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what the field types cannot: references between sections, and values that
    /// depend on one another.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first field at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, action) in &self.actions {
            let field = |f: &str| format!("actions.{name}{f}");
            if let Err(e) = validate_token(name, 255) {
                return Err(ConfigError::new(field(""), format!("action name {e}")));
            }
            if !self.destinations.contains_key(&action.destination) {
                return Err(ConfigError::new(
                    field(".destination"),
                    format!(
                        "no destination named {:?} in [destinations]",
                        action.destination
                    ),
                ));
            }
            if let Some(tool) = &action.tool {
                check_tool(name, tool).map_err(|(f, reason)| ConfigError::new(field(f), reason))?;
            }
            for (i, rule) in action.redact.iter().enumerate() {
                if let Err(e) = rule.validate() {
                    return Err(ConfigError::new(
                        field(&format!(".redact[{i}].pointer")),
                        e.to_string(),
                    ));
                }
            }
        }
        for (name, dest) in &self.destinations {
            let field = |f: &str| format!("destinations.{name}.{f}");
            if let Err(e) = dest.retry().policy().validate() {
                return Err(ConfigError::new(field("retry"), e.to_string()));
            }
            let checked = match dest {
                Destination::Http(h) => check_lookup(h.lookup.as_ref(), h.idempotency)
                    .and(match &h.signing {
                        Some(s) if s.secrets.is_empty() => Err((
                            "signing.secrets".to_owned(),
                            "name at least one secret (whsec_… or whsk_…)".to_owned(),
                        )),
                        _ => Ok(()),
                    })
                    .and(match &h.rate_limit {
                        Some(r) if !(r.per_second.is_finite() && r.per_second > 0.0) => Err((
                            "rate_limit.per_second".to_owned(),
                            format!(
                                "must be a number of requests above zero, not {}",
                                r.per_second
                            ),
                        )),
                        _ => Ok(()),
                    }),
                Destination::Mcp(m) => self.check_mcp(m),
                Destination::Amqp(_) => Ok(()),
            };
            checked.map_err(|(f, reason)| ConfigError::new(field(&f), reason))?;
        }
        Ok(())
    }

    /// An MCP destination's tool names, read-only tools (offered by the gateway beside the
    /// actions' tools, so their names must not collide) and lookup.
    fn check_mcp(&self, m: &McpConfig) -> Result<(), (String, String)> {
        if let Some(tool) = &m.tool {
            check_tool_name(tool).map_err(|reason| ("tool".to_owned(), reason))?;
        }
        for (i, tool) in m.read_only_tools.iter().enumerate() {
            let field = format!("read_only_tools[{i}]");
            check_tool_name(tool).map_err(|reason| (field.clone(), reason))?;
            let taken = self.actions.get(tool).is_some_and(|a| a.tool.is_some())
                || tool == GET_INTENT_TOOL
                || self.destinations.values().any(|d| match d {
                    Destination::Mcp(other) if !std::ptr::eq(other.as_ref(), m) => {
                        other.read_only_tools.contains(tool)
                    }
                    _ => false,
                });
            if taken || m.read_only_tools[..i].contains(tool) {
                return Err((
                    field,
                    format!("{tool:?} is already the name of another tool"),
                ));
            }
        }
        check_lookup(m.lookup.as_ref(), m.idempotency)
    }

    /// Replaces every `${NAME}` in header values and AMQP URLs by the environment variable
    /// `NAME`, read through `lookup` (the process environment at start-up, a map in tests).
    ///
    /// # Errors
    /// [`ConfigError`] naming the field whose variable is not set.
    pub fn resolve_env(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        for (name, dest) in &mut self.destinations {
            match dest {
                Destination::Amqp(a) => {
                    if let Some(url) = &mut a.amqp_url {
                        url.resolve(&format!("destinations.{name}.amqp_url"), &lookup)?;
                    }
                }
                Destination::Http(h) => {
                    resolve_headers(name, &mut h.headers, h.lookup.as_mut(), &lookup)?;
                    for (i, secret) in h
                        .signing
                        .iter_mut()
                        .flat_map(|s| &mut s.secrets)
                        .enumerate()
                    {
                        secret.resolve(
                            &format!("destinations.{name}.signing.secrets[{i}]"),
                            &lookup,
                        )?;
                    }
                }
                Destination::Mcp(m) => m.resolve_env(name, &lookup)?,
            }
        }
        Ok(())
    }

    /// The action named `name`, if configured.
    pub fn action(&self, name: &str) -> Option<&Action> {
        self.actions.get(name)
    }
}

/// The name of the MCP tool that reads an intent (`oncebox mcp`); no action may take it.
pub const GET_INTENT_TOOL: &str = "get_intent";

/// Replaces `${NAME}` in the headers of destination `name` and of its lookup.
fn resolve_headers(
    name: &str,
    headers: &mut BTreeMap<HeaderName, HeaderValue>,
    lookup_settings: Option<&mut LookupSettings>,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    for (header, value) in headers {
        value.resolve(&format!("destinations.{name}.headers.{header}"), lookup)?;
    }
    let own = lookup_settings.and_then(|l| l.headers.as_mut());
    for (header, value) in own.into_iter().flatten() {
        value.resolve(
            &format!("destinations.{name}.lookup.headers.{header}"),
            lookup,
        )?;
    }
    Ok(())
}

impl McpConfig {
    /// Replaces every `${NAME}` in the headers of MCP destination `name` (and of its lookup) by
    /// the variable read through `lookup`. The gateway resolves only the destinations whose
    /// read-only tools it passes through; the worker resolves the whole file.
    ///
    /// # Errors
    /// [`ConfigError`] naming the header whose variable is not set.
    pub fn resolve_env(
        &mut self,
        name: &str,
        lookup: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        resolve_headers(name, &mut self.headers, self.lookup.as_mut(), lookup)
    }
}

/// A name MCP clients accept for a tool.
fn check_tool_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name.len() > 128 || !name.chars().all(allowed) {
        return Err(format!(
            "{name:?} cannot be an MCP tool name: use letters, digits, '_', '-' and '.' \
             (at most 128)"
        ));
    }
    Ok(())
}

/// An action offered as a tool needs a name MCP clients accept and a description.
fn check_tool(name: &str, tool: &ToolSettings) -> Result<(), (&'static str, String)> {
    check_tool_name(name).map_err(|reason| (".tool", reason))?;
    if name == GET_INTENT_TOOL {
        return Err((
            ".tool",
            format!("{name:?} is the name of oncebox's own tool"),
        ));
    }
    if tool.description.trim().is_empty() {
        return Err((".tool.description", "must say what the tool does".into()));
    }
    match &tool.key {
        Some(pointers) if pointers.is_empty() => {
            return Err((
                ".tool.key",
                "name at least one argument (a JSON pointer such as \"/order_id\"), or leave \
                 key out to identify a call by all its arguments"
                    .into(),
            ));
        }
        Some(pointers) if pointers.iter().any(JsonPointer::is_root) => {
            return Err((
                ".tool.key",
                "must name arguments such as \"/order_id\", not the whole object".into(),
            ));
        }
        _ => {}
    }
    Ok(())
}

/// A destination's lookup: required for `idempotency = "lookup"`, a URL template naming the
/// key, fields that name a field.
fn check_lookup(
    lookup: Option<&LookupSettings>,
    idempotency: IdempotencyMode,
) -> Result<(), (String, String)> {
    match (lookup, idempotency) {
        (None, IdempotencyMode::Lookup) => {
            return Err((
                "lookup".into(),
                "required for idempotency = \"lookup\"".into(),
            ));
        }
        (Some(l), _) => {
            let url = l.url.as_str();
            if !(url.contains("{key}") || url.contains("{external_reference}")) {
                return Err((
                    "lookup.url".into(),
                    "must contain {key} or {external_reference}".into(),
                ));
            }
            // What an intent brings may choose the path or the query, never the host.
            let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
            let authority = after_scheme
                .split(['/', '?', '#'])
                .next()
                .unwrap_or_default();
            if authority.contains('{') {
                return Err((
                    "lookup.url".into(),
                    "{key} and {external_reference} may appear in the path or the query, not in \
                     the host"
                        .into(),
                ));
            }
            if let Some(i) = l.fields.iter().position(JsonPointer::is_root) {
                return Err((
                    format!("lookup.fields[{i}]"),
                    "must name a field such as \"/amount\", not the whole object".into(),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests;
