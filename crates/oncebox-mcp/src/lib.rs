//! oncebox's MCP gateway: the configured actions that say `[actions.X.tool]` become MCP tools,
//! and **a tool call is an intent**. MCP has no idempotency for `tools/call`; a client that
//! lost an answer cannot tell "never arrived" from "executed, answer lost". Here a call's
//! identity never depends on the transport session (clients such as LangChain's adapters open
//! one per call): it is the caller's explicit key; else `step_key(run, step, tool, arguments)`
//! for a caller that names its run; else the tool and its identifying arguments (the action's
//! `key`, or all of them) within the action's dedupe window ([`oncebox_core::CallIdentity`]).
//! A retried call finds the same intent and never acts twice.
//!
//! Served over stdio by `oncebox mcp` (one tenant, given on the command line) and over
//! streamable HTTP at `/mcp` by `oncebox serve` (the tenant of the bearer token, which the API's
//! authentication puts in the request's extensions as a [`Caller`]).
//!
//! The call's `_meta` may carry (see docs/mcp.md):
//! - [`META_KEY`] — the idempotency key itself;
//! - [`META_RUN`] — the agent run (the session of `step_key`);
//! - [`META_STEP`] — the step within the run, a non-negative integer (default 0);
//! - [`META_ORDERING_KEY`] — an ordering key (calls with the same one run one at a time, in
//!   order).

mod passthrough;
mod result;
mod tasks;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use oncebox_core::config::{Config, GET_INTENT_TOOL, ToolSettings};
use oncebox_core::{IntentNames, InvalidIntent, NewIntent, Status, step_key};
use oncebox_store::tokens::Caller;
use oncebox_store::{Intake, Intent, SubmitError, intent_by_key};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    GetTaskResult, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::sync::watch;

pub use passthrough::Passthrough;
pub use result::{intent_result, refusal};

/// `_meta` key of an explicit idempotency key.
pub const META_KEY: &str = oncebox_delivery::mcp::META_KEY;
/// `_meta` key of the agent run (`step_key`'s session).
pub const META_RUN: &str = "oncebox.dev/run_id";
/// `_meta` key of the step within the run.
pub const META_STEP: &str = "oncebox.dev/step";
/// `_meta` key of the call's ordering key: calls of one tenant to the same destination with the
/// same ordering key are carried out one at a time, in the order they were made.
pub const META_ORDERING_KEY: &str = "oncebox.dev/ordering_key";

/// Whose calls these are.
#[derive(Debug, Clone)]
pub enum Tenancy {
    /// One tenant for the whole process (`oncebox mcp --tenant T`, over stdio).
    Fixed {
        /// The tenant.
        tenant: String,
    },
    /// The tenant of the bearer token of each HTTP request (a [`Caller`] in its extensions).
    PerRequest,
}

/// The gateway: tools from the configuration, calls submitted as intents and awaited.
#[derive(Clone)]
pub struct Gateway {
    pool: PgPool,
    intake: Intake,
    tools: Arc<BTreeMap<String, Tool>>,
    /// Each tool's settings: how a call that names no key is identified.
    settings: Arc<BTreeMap<String, ToolSettings>>,
    wait: Duration,
    tenancy: Tenancy,
    settled: watch::Receiver<u64>,
    passthrough: Arc<Passthrough>,
}

impl Gateway {
    /// A gateway over `pool` for the tool actions of `config`, submitting with `intake` and
    /// waiting up to `wait` for a call's intent to settle. `settled` is
    /// [`oncebox_store::listen_for_settled`]'s counter.
    pub fn new(
        pool: PgPool,
        config: &Config,
        intake: Intake,
        wait: Duration,
        tenancy: Tenancy,
        settled: watch::Receiver<u64>,
    ) -> Gateway {
        Gateway {
            pool,
            intake,
            tools: Arc::new(tools(config)),
            settings: Arc::new(
                config
                    .actions
                    .iter()
                    .filter_map(|(name, a)| Some((name.clone(), a.tool.clone()?)))
                    .collect(),
            ),
            wait,
            tenancy,
            settled,
            passthrough: Arc::default(),
        }
    }

    /// The gateway also offering `passthrough`'s read-only upstream tools, called directly.
    #[must_use]
    pub fn with_passthrough(mut self, passthrough: Passthrough) -> Gateway {
        self.passthrough = Arc::new(passthrough);
        self
    }

    /// The tools offered: the configured ones and [`GET_INTENT_TOOL`].
    pub fn tools(&self) -> Vec<Tool> {
        let mut all: Vec<Tool> = self.tools.values().cloned().collect();
        all.push(get_intent_tool());
        all
    }

    /// The tenant of this request.
    fn who(&self, context: &RequestContext<RoleServer>) -> Result<String, McpError> {
        match &self.tenancy {
            Tenancy::Fixed { tenant } => Ok(tenant.clone()),
            Tenancy::PerRequest => {
                let parts = context.extensions.get::<http::request::Parts>();
                let caller = parts.and_then(|p| p.extensions.get::<Caller>());
                let Some(caller) = caller else {
                    return Err(McpError::invalid_request("no authenticated caller", None));
                };
                Ok(caller.tenant_id.clone())
            }
        }
    }

    /// Who submits through this request, where a token says (its principal): that principal
    /// may not approve what it submits. Over stdio, `None`: the intake's configured principal,
    /// or else the database role, is recorded.
    fn submitter(context: &RequestContext<RoleServer>) -> Option<String> {
        let parts = context.extensions.get::<http::request::Parts>()?;
        let caller = parts.extensions.get::<Caller>()?;
        Some(caller.actor("mcp").who)
    }

    /// Who cancels through this request: its token's principal; over stdio, the intake's
    /// configured principal, or else the database role the gateway connects as (`db:ROLE`).
    fn canceller(&self, context: &RequestContext<RoleServer>) -> String {
        Self::submitter(context)
            .or_else(|| self.intake.principal().map(str::to_owned))
            .unwrap_or_else(|| format!("db:{}", self.pool.connect_options().get_username()))
    }

    /// Submits one call of `tool` as an intent and waits for it to settle: its intent, or the
    /// refusal that stopped it. `tasks`: the client takes a task for an intent still on its way.
    async fn call(
        &self,
        (tenant, submitter): (String, Option<String>),
        tool: &str,
        arguments: JsonObject,
        meta: &JsonObject,
        tasks: bool,
    ) -> Result<CallToolResponse, McpError> {
        let arguments = Value::Object(arguments);
        let Some(settings) = self.settings.get(tool) else {
            return Err(McpError::invalid_params(
                format!("no tool named {tool:?}"),
                None,
            ));
        };
        let (key, run_id, step) = match key_of(tool, settings, &arguments, meta) {
            Ok(CallKey::Given(key, run, step)) => (key, run, step),
            Ok(CallKey::Identity(identity)) => {
                let at = std::time::SystemTime::now();
                let key = oncebox_store::call_key(&self.pool, &tenant, &identity, at)
                    .await
                    .map_err(internal)?;
                (key, None, None)
            }
            Err(e) => return Ok(refusal("invalid", &e.field, &e.reason).into()),
        };
        let ordering_key = match meta.get(META_ORDERING_KEY) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                let field = format!("_meta/{META_ORDERING_KEY}");
                return Ok(refusal("invalid", &field, "must be a string").into());
            }
        };
        let intent = NewIntent {
            run_id,
            step,
            ordering_key,
            ..NewIntent::new(
                IntentNames {
                    tenant_id: &tenant,
                    idempotency_key: &key,
                    action: tool,
                },
                arguments,
            )
        };
        // Watched from before the submit: a settlement right after it still wakes the wait.
        let settled = self.watch_settled();
        let mut conn = self.pool.acquire().await.map_err(internal)?;
        let submitted = match &submitter {
            Some(by) => self.intake.submit_alone_as(&mut conn, intent, by).await,
            None => self.intake.submit_alone(&mut conn, intent).await,
        };
        let submitted = match submitted {
            Ok(submitted) => submitted.intent,
            Err(SubmitError::Invalid(e)) => {
                return Ok(refusal("invalid", &e.field, &e.reason).into());
            }
            Err(e @ SubmitError::KeyConflict { .. }) => {
                return Ok(refusal("conflict", "idempotency_key", &e.to_string()).into());
            }
            Err(SubmitError::Store(e)) => return Err(internal(e)),
        };
        drop(conn);
        let intent = self.await_settled(settled, submitted).await?;
        let on_its_way = !intent.status.is_settled() || intent.status == Status::AwaitingApproval;
        if tasks && on_its_way {
            return Ok(CallToolResponse::Task(tasks::created(&intent)));
        }
        Ok(intent_result(&intent).into())
    }

    /// `tasks/cancel`: cancels the task's intent if it was never dispatched.
    async fn cancel(&self, tenant: &str, key: &str, who: String) -> Result<(), McpError> {
        let intent = self.own(tenant, key).await?;
        if intent.status == Status::AwaitingApproval {
            return Err(McpError::invalid_request(
                format!(
                    "intent {key} awaits approval by people: it cannot be cancelled here; a person rejects it"
                ),
                None,
            ));
        }
        if intent.status.is_settled() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await.map_err(internal)?;
        let actor = oncebox_store::ops::Actor::new(who, "agent", "mcp");
        let why = Some("tasks/cancel");
        match oncebox_store::ops::cancel(&mut tx, intent.id, &actor, why).await {
            Ok(_) => tx.commit().await.map_err(internal),
            Err(oncebox_store::ops::OpsError::Refused(why)) => {
                Err(McpError::invalid_request(why, None))
            }
            Err(e) => Err(internal(e)),
        }
    }

    /// The tenant's intent under `key` (a task id), or an error naming it. A key that could
    /// never have been accepted is refused as such, without asking the database.
    async fn own(&self, tenant: &str, key: &str) -> Result<Intent, McpError> {
        if let Err(e) = oncebox_core::validate_key(key) {
            return Err(McpError::invalid_params(
                format!("no task {key:?}: a task id is an idempotency key, and this one {e}"),
                None,
            ));
        }
        intent_by_key(&self.pool, tenant, key)
            .await
            .map_err(internal)?
            .ok_or_else(|| McpError::invalid_params(format!("no task {key:?}"), None))
    }

    /// The settlement counter, marked seen: read the intent after this, then wait with it.
    fn watch_settled(&self) -> watch::Receiver<u64> {
        let mut settled = self.settled.clone();
        settled.mark_unchanged();
        settled
    }

    /// `intent` (read after `settled` was marked seen) once settled, or as it stands when the
    /// wait runs out; re-read after each settlement.
    async fn await_settled(
        &self,
        mut settled: watch::Receiver<u64>,
        mut intent: Intent,
    ) -> Result<Intent, McpError> {
        let deadline = tokio::time::Instant::now() + self.wait;
        while !intent.status.is_settled() && tokio::time::Instant::now() < deadline {
            oncebox_store::next_settlement(&mut settled, deadline).await;
            settled.mark_unchanged();
            intent = intent_by_key(&self.pool, &intent.tenant_id, &intent.idempotency_key)
                .await
                .map_err(internal)?
                .ok_or_else(|| McpError::internal_error("the intent vanished", None))?;
        }
        Ok(intent)
    }

    /// `get_intent`: the intent under a key, as it stands (waiting up to `wait_seconds`).
    async fn get_intent(
        &self,
        tenant: &str,
        arguments: &JsonObject,
    ) -> Result<CallToolResult, McpError> {
        let Some(key) = arguments.get("idempotency_key").and_then(Value::as_str) else {
            return Ok(refusal(
                "invalid",
                "idempotency_key",
                "give the key a call's result named",
            ));
        };
        if let Err(e) = oncebox_core::validate_key(key) {
            return Ok(refusal(
                "invalid",
                "idempotency_key",
                &format!("no call can have had this key: it {e}"),
            ));
        }
        let settled = self.watch_settled();
        match intent_by_key(&self.pool, tenant, key)
            .await
            .map_err(internal)?
        {
            None => Ok(refusal(
                "not_found",
                "idempotency_key",
                "this tenant has no such key",
            )),
            Some(intent) => Ok(intent_result(&self.await_settled(settled, intent).await?)),
        }
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("oncebox", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool call is recorded as an intent and carried out at most once: calling \
                 again with the same arguments returns the first call's outcome, whatever the \
                 connection (within a day by default). For a deliberate second effect, change an \
                 argument that identifies the call or give a new _meta \
                 oncebox.dev/idempotency_key. A result whose status is pending is still on its \
                 way: follow it with get_intent.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self.tools();
        tools.extend(self.passthrough.tools().await);
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        if name == GET_INTENT_TOOL {
            return Some(get_intent_tool());
        }
        self.tools
            .get(name)
            .cloned()
            .or_else(|| self.passthrough.tool(name))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, McpError> {
        let tenant = self.who(&context)?;
        let arguments = request.arguments.clone().unwrap_or_default();
        let name = request.name.as_ref();
        if name == GET_INTENT_TOOL {
            return self.get_intent(&tenant, &arguments).await.map(Into::into);
        }
        if self.passthrough.has(name) {
            let meta = request
                .meta
                .as_ref()
                .map(|m| m.0.0.clone())
                .unwrap_or_default();
            return self
                .passthrough
                .call(&tenant, name, arguments, meta, self.wait)
                .await
                .map(Into::into);
        }
        if !self.tools.contains_key(name) {
            return Err(McpError::invalid_params(
                format!("no tool named {name:?}"),
                None,
            ));
        }
        let meta = request
            .meta
            .as_ref()
            .map(|m| m.0.0.clone())
            .unwrap_or_else(|| context.meta.0.0.clone());
        let tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        let who = (tenant, Self::submitter(&context));
        self.call(who, name, arguments, &meta, tasks).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        let tenant = self.who(&context)?;
        let intent = self.own(&tenant, &request.task_id).await?;
        Ok(GetTaskResult::new(tasks::detailed(&intent)))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let tenant = self.who(&context)?;
        let who = self.canceller(&context);
        self.cancel(&tenant, &request.task_id, who).await
    }
}

/// The tools of `config`: actions with `[actions.X.tool]`.
fn tools(config: &Config) -> BTreeMap<String, Tool> {
    config
        .actions
        .iter()
        .filter_map(|(name, action)| {
            let settings = action.tool.as_ref()?;
            let schema = action
                .arguments_schema
                .as_ref()
                .and_then(|s| s.source().as_object().cloned())
                .unwrap_or_else(|| {
                    json!({"type": "object"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default()
                });
            let mut annotations = ToolAnnotations::new();
            annotations.read_only_hint = Some(false);
            annotations.destructive_hint = Some(settings.destructive);
            annotations.idempotent_hint = Some(true);
            annotations.open_world_hint = Some(true);
            annotations.title.clone_from(&settings.title);
            let mut tool = Tool::new(name.clone(), settings.description.clone(), Arc::new(schema))
                .with_annotations(annotations);
            if let Some(title) = &settings.title {
                tool = tool.with_title(title.clone());
            }
            Some((name.clone(), tool))
        })
        .collect()
}

/// oncebox's own tool: read the intent of an earlier call.
fn get_intent_tool() -> Tool {
    let schema = json!({
        "type": "object",
        "required": ["idempotency_key"],
        "properties": {
            "idempotency_key": {
                "type": "string",
                "description": "the key an earlier call's result named"
            }
        },
        "additionalProperties": false
    });
    let mut annotations = ToolAnnotations::new();
    annotations.read_only_hint = Some(true);
    annotations.destructive_hint = Some(false);
    annotations.idempotent_hint = Some(true);
    annotations.open_world_hint = Some(false);
    Tool::new(
        GET_INTENT_TOOL,
        "Read the intent of an earlier tool call by its idempotency key (from that call's \
         result): its status, the receiver's reference and answer. Waits briefly while it is \
         still on its way.",
        Arc::new(schema.as_object().cloned().unwrap_or_default()),
    )
    .with_annotations(annotations)
}

/// How a call is identified.
#[derive(Debug, PartialEq)]
enum CallKey {
    /// By the caller: its explicit key, or the key of its run and step (the key, and the run
    /// and step recorded with the intent, if given).
    Given(String, Option<String>, Option<String>),
    /// By its tool and identifying arguments, one intent per dedupe window.
    Identity(oncebox_core::CallIdentity),
}

/// The call's identity, never the transport session's: the explicit key (with the run and step
/// given, if any); else, with a run in `_meta`, `step_key(run, step, tool, arguments)` (step
/// from `_meta`, 0 when absent); else the tool and its identifying arguments (`settings`' key,
/// or all the arguments) within its dedupe window. Otherwise the field at fault, and why.
fn key_of(
    tool: &str,
    settings: &ToolSettings,
    arguments: &Value,
    meta: &JsonObject,
) -> Result<CallKey, InvalidIntent> {
    let text = |name: &str| -> Result<Option<String>, InvalidIntent> {
        match meta.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(InvalidIntent::new(
                format!("_meta/{name}"),
                "must be a string",
            )),
        }
    };
    let run = text(META_RUN)?;
    let given_step = text(META_STEP)?;
    let step_text = given_step.clone().unwrap_or_else(|| "0".into());
    let step: u64 = step_text.parse().map_err(|_| {
        InvalidIntent::new(
            format!("_meta/{META_STEP}"),
            format!("{step_text:?} is not a non-negative integer"),
        )
    })?;
    if let Some(key) = text(META_KEY)? {
        return Ok(CallKey::Given(key, run, given_step));
    }
    if let Some(run) = run {
        let key = step_key(&run, step, tool, arguments);
        return Ok(CallKey::Given(key, Some(run), Some(step.to_string())));
    }
    settings.identity(tool, arguments).map(CallKey::Identity)
}

fn internal(e: impl std::fmt::Display) -> McpError {
    tracing::warn!(error = %e, "MCP call failed on the database");
    McpError::internal_error(
        "the database failed; call again with the same arguments",
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap_or_default()
    }

    fn settings(key: Option<&[&str]>) -> ToolSettings {
        let toml = match key {
            None => "description = \"d\"".to_owned(),
            Some(k) => format!("description = \"d\"\nkey = {k:?}"),
        };
        toml::from_str(&toml).expect("settings")
    }

    #[test]
    fn the_key_is_explicit_or_derived_from_run_and_step() {
        let args = json!({"a": 1});
        let s = settings(None);
        let given = key_of("t", &s, &args, &meta(json!({META_KEY: "k-1"})));
        assert_eq!(given, Ok(CallKey::Given("k-1".into(), None, None)));
        let derived = key_of(
            "t",
            &s,
            &args,
            &meta(json!({META_RUN: "run-7", META_STEP: 3})),
        );
        assert_eq!(
            derived,
            Ok(CallKey::Given(
                step_key("run-7", 3, "t", &args),
                Some("run-7".into()),
                Some("3".into())
            ))
        );
    }

    /// Without a key or a run, a call is its tool and identifying arguments — whatever the
    /// session it came in: the same identity for equal identifying values, another for others.
    #[test]
    fn without_key_or_run_a_call_is_its_tool_and_identifying_arguments() {
        let by_order = settings(Some(&["/order_id"]));
        let identity = |s: &ToolSettings, args: Value| match key_of("t", s, &args, &meta(json!({})))
        {
            Ok(CallKey::Identity(id)) => id,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            identity(&by_order, json!({"order_id": "o-1", "note": "a"})),
            identity(&by_order, json!({"order_id": "o-1", "note": "b"})),
            "only the identifying arguments count"
        );
        assert_ne!(
            identity(&by_order, json!({"order_id": "o-1"})),
            identity(&by_order, json!({"order_id": "o-2"}))
        );
        let all = settings(None);
        assert_ne!(
            identity(&all, json!({"order_id": "o-1", "note": "a"})),
            identity(&all, json!({"order_id": "o-1", "note": "b"})),
            "by default every argument identifies the call"
        );
        assert_eq!(
            all.dedupe_window.get(),
            std::time::Duration::from_secs(86_400)
        );
        let missing = key_of("t", &by_order, &json!({"note": "a"}), &meta(json!({})));
        assert_eq!(
            missing.map(|_| ()).expect_err("missing").field,
            "arguments/order_id"
        );
    }

    #[test]
    fn a_bad_step_is_refused_naming_it() {
        let refused = key_of(
            "t",
            &settings(None),
            &json!({}),
            &meta(json!({META_RUN: "r", META_STEP: "x"})),
        )
        .map(|_| ())
        .expect_err("bad step");
        assert_eq!(refused.field, format!("_meta/{META_STEP}"));
    }
}
