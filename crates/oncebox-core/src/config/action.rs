//! `[actions.NAME]`: what an agent may request, where it goes, and how it is offered as a tool.

use serde::Deserialize;

use super::defaults;
use super::{ConfigError, GET_INTENT_TOOL, JsonPointer};
use crate::duration::NonZeroDuration;
use crate::invalid::InvalidIntent;
use crate::redact::RedactRule;
use crate::schema::ArgumentsSchema;

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
    /// Which intents wait for people to approve them before they are sent:
    /// `[actions.X.approval]` ([`super::Approval`]).
    #[serde(default)]
    pub approval: Option<super::Approval>,
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
    ) -> Result<crate::key::CallIdentity, InvalidIntent> {
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

/// A name MCP clients accept for a tool.
pub(super) fn check_tool_name(name: &str) -> Result<(), String> {
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
pub(super) fn check_tool(name: &str, tool: &ToolSettings) -> Result<(), ConfigError> {
    check_tool_name(name).map_err(|reason| ConfigError::new("tool", reason))?;
    if name == GET_INTENT_TOOL {
        return Err(ConfigError::new(
            "tool",
            format!("{name:?} is the name of oncebox's own tool"),
        ));
    }
    if tool.description.trim().is_empty() {
        return Err(ConfigError::new(
            "tool.description",
            "must say what the tool does",
        ));
    }
    match &tool.key {
        Some(pointers) if pointers.is_empty() => {
            return Err(ConfigError::new(
                "tool.key",
                "name at least one argument (a JSON pointer such as \"/order_id\"), or leave \
                 key out to identify a call by all its arguments",
            ));
        }
        Some(pointers) if pointers.iter().any(JsonPointer::is_root) => {
            return Err(ConfigError::new(
                "tool.key",
                "must name arguments such as \"/order_id\", not the whole object",
            ));
        }
        _ => {}
    }
    Ok(())
}
