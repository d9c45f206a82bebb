//! The settings more than one kind of destination has: how a repeated key is treated, retries,
//! the reconciliation lookup, ordering lanes, and `${NAME}` in headers. A leaf: the kinds
//! (`http`, `amqp`, `mcp`) use it, and it uses none of them.

use std::collections::BTreeMap;
use std::num::NonZeroU32;

use serde::Deserialize;

use super::defaults;
use super::{ConfigError, HeaderName, HeaderValue, HttpUrl, JsonPointer};
use crate::duration::{HumanDuration, NonZeroDuration};
use crate::retry::RetryPolicy;

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

/// A destination's lookup: required for `idempotency = "lookup"`, a URL template naming the
/// key, fields that name a field.
pub(super) fn check_lookup(
    lookup: Option<&LookupSettings>,
    idempotency: IdempotencyMode,
) -> Result<(), ConfigError> {
    match (lookup, idempotency) {
        (None, IdempotencyMode::Lookup) => {
            return Err(ConfigError::new(
                "lookup",
                "required for idempotency = \"lookup\"",
            ));
        }
        (Some(l), _) => {
            let url = l.url.as_str();
            if !(url.contains("{key}") || url.contains("{external_reference}")) {
                return Err(ConfigError::new(
                    "lookup.url",
                    "must contain {key} or {external_reference}",
                ));
            }
            // What an intent brings may choose the path or the query, never the host.
            let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
            let authority = after_scheme
                .split(['/', '?', '#'])
                .next()
                .unwrap_or_default();
            if authority.contains('{') {
                return Err(ConfigError::new(
                    "lookup.url",
                    "{key} and {external_reference} may appear in the path or the query, not in \
                     the host",
                ));
            }
            if let Some(i) = l.fields.iter().position(JsonPointer::is_root) {
                return Err(ConfigError::new(
                    format!("lookup.fields[{i}]"),
                    "must name a field such as \"/amount\", not the whole object",
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Replaces `${NAME}` in the headers of destination `name` and of its lookup.
pub(super) fn resolve_headers(
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
