//! Read-only tools of upstream MCP servers (`read_only_tools` of an `mcp` destination), offered
//! by the gateway as the upstream describes them and called directly: a call that changes
//! nothing needs no intent, and journaling it would only slow a lookup down.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncebox_core::config::{Config, ConfigError, Destination};
use oncebox_delivery::McpClient;
use oncebox_delivery::mcp::{Exchange, META_TENANT};
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ErrorCode, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

/// The read-only tools passed through, by name, with the client of their server.
#[derive(Debug, Default)]
pub struct Passthrough {
    by_tool: BTreeMap<String, Arc<McpClient>>,
    /// The upstream descriptions last listed, by tool name.
    listed: Mutex<BTreeMap<String, Tool>>,
}

impl Passthrough {
    /// The read-only tools of every `mcp` destination of `config`, their headers' `${NAME}`
    /// read through `env` (only these destinations': the gateway needs no other secret).
    ///
    /// # Errors
    /// [`ConfigError`] naming the header whose variable is not set or whose value is not valid
    /// in HTTP.
    pub fn from_config(
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Passthrough, ConfigError> {
        let mut by_tool = BTreeMap::new();
        for (name, dest) in &config.destinations {
            let Destination::Mcp(m) = dest else { continue };
            if m.read_only_tools.is_empty() {
                continue;
            }
            let mut m = m.as_ref().clone();
            m.resolve_env(name, &env)?;
            let client = McpClient::new(name, m.url.as_str(), &m.headers, m.timeout.get())
                .map_err(|e| {
                    ConfigError::new(format!("destinations.{name}.headers"), e.to_string())
                })?;
            let client = Arc::new(client);
            for tool in &m.read_only_tools {
                by_tool.insert(tool.clone(), client.clone());
            }
        }
        Ok(Passthrough {
            by_tool,
            listed: Mutex::new(BTreeMap::new()),
        })
    }

    /// True when `name` is a passed-through tool.
    pub fn has(&self, name: &str) -> bool {
        self.by_tool.contains_key(name)
    }

    /// The passed-through tools as their servers describe them now, marked read-only. A server
    /// that cannot be listed leaves its tools out (and says so in the log); calls still go to it.
    pub async fn tools(&self) -> Vec<Tool> {
        let mut found = BTreeMap::new();
        let mut asked: Vec<&Arc<McpClient>> = Vec::new();
        for client in self.by_tool.values() {
            if asked.iter().any(|a| Arc::ptr_eq(a, client)) {
                continue;
            }
            asked.push(client);
            let listed = match client.list_tools().await {
                Ok(listed) => listed,
                Err(e) => {
                    tracing::warn!(error = %e, "an upstream MCP server could not be listed");
                    continue;
                }
            };
            for tool in listed {
                let Ok(mut tool) = serde_json::from_value::<Tool>(tool) else {
                    continue;
                };
                let ours = self
                    .by_tool
                    .get(tool.name.as_ref())
                    .is_some_and(|c| Arc::ptr_eq(c, client));
                if ours {
                    tool.annotations = Some(read_only(tool.annotations.take()));
                    found.insert(tool.name.to_string(), tool);
                }
            }
        }
        if let Ok(mut listed) = self.listed.lock() {
            listed.clone_from(&found);
        }
        found.into_values().collect()
    }

    /// The tool `name` as last listed.
    pub fn tool(&self, name: &str) -> Option<Tool> {
        self.listed.lock().ok()?.get(name).cloned()
    }

    /// Calls read-only tool `name` upstream for `tenant` with the caller's arguments and
    /// `_meta`, within `wait`; the upstream's result is the answer. The call carries the
    /// tenant (`_meta` `oncebox.dev/tenant` and `X-Oncebox-Tenant`, whatever the caller put
    /// there): one upstream credential serves every tenant, and the upstream must be able to
    /// keep each to its own objects.
    ///
    /// # Errors
    /// The upstream's JSON-RPC refusal, as is.
    pub async fn call(
        &self,
        tenant: &str,
        name: &str,
        arguments: JsonObject,
        mut meta: JsonObject,
        wait: Duration,
    ) -> Result<CallToolResult, McpError> {
        let Some(client) = self.by_tool.get(name) else {
            return Err(McpError::invalid_params(
                format!("no tool named {name:?}"),
                None,
            ));
        };
        let arguments = Value::Object(arguments);
        meta.insert(META_TENANT.to_owned(), Value::from(tenant));
        let tenant_header = [("x-oncebox-tenant", tenant)];
        let call = client.call_tool(name, &arguments, Value::Object(meta), &tenant_header);
        let answer = tokio::time::timeout(wait, call)
            .await
            .unwrap_or_else(|_| Exchange::NoAnswer(timed_out(wait)));
        match answer {
            Exchange::Result(result) => serde_json::from_value(result)
                .map_err(|e| McpError::internal_error(format!("the upstream's result: {e}"), None)),
            Exchange::Refused { code, message } => {
                let code = i32::try_from(code).unwrap_or(ErrorCode::INTERNAL_ERROR.0);
                Err(McpError::new(ErrorCode(code), message, None))
            }
            other => Ok(CallToolResult::structured_error(json!({
                "status": "upstream_unavailable",
                "detail": format!("the server of this read-only tool did not answer: {}", describe(&other)),
            }))),
        }
    }
}

fn timed_out(wait: Duration) -> oncebox_core::outcome::AttemptError {
    oncebox_core::outcome::AttemptError::new(
        oncebox_core::outcome::ErrorCode::Timeout,
        format!("no answer within {wait:?}"),
    )
}

fn describe(answer: &Exchange) -> String {
    match answer {
        Exchange::NotSent { error, .. } | Exchange::NoAnswer(error) => error.detail.clone(),
        Exchange::Status { status, text, .. } => format!("HTTP {status}: {text}"),
        Exchange::Refused { message, .. } => message.clone(),
        Exchange::Result(_) => String::new(),
    }
}

/// The upstream's annotations, made to say what oncebox's configuration says: read-only.
fn read_only(given: Option<ToolAnnotations>) -> ToolAnnotations {
    let mut annotations = given.unwrap_or_default();
    annotations.read_only_hint = Some(true);
    annotations.destructive_hint = Some(false);
    annotations.idempotent_hint = Some(true);
    annotations
}
