//! `kind = "mcp"`: a tool on an upstream MCP server, called over streamable HTTP.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use serde::Deserialize;

use super::defaults;
use super::{
    ConfigError, HeaderName, HeaderValue, HttpUrl, IdempotencyMode, JsonPointer, LookupSettings,
    OrderingSettings, RetrySettings, resolve_headers,
};
use crate::duration::{HumanDuration, NonZeroDuration};

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
