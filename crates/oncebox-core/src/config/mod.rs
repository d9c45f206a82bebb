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

mod action;
mod amqp;
mod approval;
mod console;
mod defaults;
mod destination;
mod errors;
mod http;
mod mcp;
mod types;

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::time::Duration;

use serde::Deserialize;

use crate::key::validate_token;

pub use action::{Action, ToolSettings};
pub use amqp::{AmqpConfig, AmqpIdempotency};
pub use approval::{Approval, ApprovalCondition};
pub use console::{CALLBACK_PATH, ConsoleConfig, ConsoleRole, GroupGrant, OidcConfig};
pub use destination::{
    IdempotencyMode, LaneFailure, LookupSettings, OrderingSettings, RetrySettings,
};
pub use errors::ConfigError;
pub use http::{BreakerSettings, HttpConfig, HttpMethod, RateLimitSettings, SigningSettings};
pub use mcp::McpConfig;
pub use types::{HeaderName, HeaderValue, HttpStatus, HttpUrl, JsonPointer};

use action::{check_tool, check_tool_name};
use destination::{check_lookup, resolve_headers};

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
    /// How people sign in to the web console.
    #[serde(default)]
    pub console: ConsoleConfig,
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

/// What every kind of destination has, read through one view: the worker and the intake ask
/// a destination for these without matching on its kind.
#[derive(Debug, Clone, Copy)]
pub struct Shared<'a> {
    /// How the receiver treats repeated keys (AMQP destinations honour them by contract).
    pub idempotency: IdempotencyMode,
    /// One request's (or confirm's) timeout.
    pub timeout: Duration,
    /// The retry settings.
    pub retry: &'a RetrySettings,
    /// The per-worker in-flight limit, if any.
    pub max_in_flight: Option<NonZeroUsize>,
    /// What its ordering lanes do when their head fails.
    pub ordering: OrderingSettings,
    /// The reconciliation lookup, if any (AMQP destinations have none).
    pub lookup: Option<&'a LookupSettings>,
    /// How long a lookup that finds nothing may lag behind the dispatch (zero without one).
    pub consistency_window: Duration,
    /// The circuit breaker, if configured (HTTP destinations).
    pub breaker: Option<&'a BreakerSettings>,
    /// The pool-wide request rate, if configured (HTTP destinations).
    pub rate_limit: Option<&'a RateLimitSettings>,
}

impl Destination {
    /// What this destination shares with every other kind.
    pub fn shared(&self) -> Shared<'_> {
        match self {
            Destination::Http(h) => Shared {
                idempotency: h.idempotency,
                timeout: h.timeout.get(),
                retry: &h.retry,
                max_in_flight: h.max_in_flight,
                ordering: h.ordering,
                lookup: h.lookup.as_ref(),
                consistency_window: h.consistency_window.get(),
                breaker: h.breaker.as_ref(),
                rate_limit: h.rate_limit.as_ref(),
            },
            Destination::Amqp(a) => Shared {
                idempotency: IdempotencyMode::Key,
                timeout: a.timeout.get(),
                retry: &a.retry,
                max_in_flight: a.max_in_flight,
                ordering: a.ordering,
                lookup: None,
                consistency_window: Duration::ZERO,
                breaker: None,
                rate_limit: None,
            },
            Destination::Mcp(m) => Shared {
                idempotency: m.idempotency,
                timeout: m.timeout.get(),
                retry: &m.retry,
                max_in_flight: m.max_in_flight,
                ordering: m.ordering,
                lookup: m.lookup.as_ref(),
                consistency_window: m.consistency_window.get(),
                breaker: None,
                rate_limit: None,
            },
        }
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
                check_tool(name, tool).map_err(|e| e.within(&field(".")))?;
            }
            if let Some(notify) = action.approval.as_ref().and_then(|a| a.notify.as_ref()) {
                self.check_approval_notify(notify)
                    .map_err(|reason| ConfigError::new(field(".approval.notify"), reason))?;
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
            if let Err(e) = validate_token(name, 255) {
                return Err(ConfigError::new(
                    format!("destinations.{name}"),
                    format!("destination name {e}"),
                ));
            }
            let within = format!("destinations.{name}.");
            if let Err(e) = dest.shared().retry.policy().validate() {
                return Err(ConfigError::new(format!("{within}retry"), e.to_string()));
            }
            match dest {
                Destination::Http(h) => h.check(),
                Destination::Mcp(m) => self.check_mcp(m),
                Destination::Amqp(_) => Ok(()),
            }
            .map_err(|e| e.within(&within))?;
        }
        if let Some(oidc) = &self.console.oidc {
            oidc.check().map_err(|e| e.within("console.oidc."))?;
        }
        Ok(())
    }

    /// The destination an approval policy notifies: configured, HTTP or AMQP, and executing no
    /// action (it might take the message for a request).
    fn check_approval_notify(&self, notify: &str) -> Result<(), String> {
        let executes = self
            .actions
            .iter()
            .find(|(_, a)| a.destination == notify)
            .map(|(name, _)| name);
        match (self.destinations.get(notify), executes) {
            (None, _) => Err(format!("no destination named {notify:?} in [destinations]")),
            (Some(Destination::Mcp(_)), _) => Err(format!(
                "destination {notify:?} is an MCP tool; approval requests go to an HTTP or AMQP destination"
            )),
            (Some(_), Some(action)) => Err(format!(
                "destination {notify:?} executes action {action:?}; name one that only receives approval requests"
            )),
            (Some(_), None) => Ok(()),
        }
    }

    /// An MCP destination's tool names, read-only tools (offered by the gateway beside the
    /// actions' tools, so their names must not collide) and lookup.
    fn check_mcp(&self, m: &McpConfig) -> Result<(), ConfigError> {
        if let Some(tool) = &m.tool {
            check_tool_name(tool).map_err(|reason| ConfigError::new("tool", reason))?;
        }
        for (i, tool) in m.read_only_tools.iter().enumerate() {
            let field = format!("read_only_tools[{i}]");
            check_tool_name(tool).map_err(|reason| ConfigError::new(field.clone(), reason))?;
            let taken = self.actions.get(tool).is_some_and(|a| a.tool.is_some())
                || tool == GET_INTENT_TOOL
                || self.destinations.values().any(|d| match d {
                    Destination::Mcp(other) if !std::ptr::eq(other.as_ref(), m) => {
                        other.read_only_tools.contains(tool)
                    }
                    _ => false,
                });
            if taken || m.read_only_tools[..i].contains(tool) {
                return Err(ConfigError::new(
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

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
