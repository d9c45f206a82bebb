//! The native part of the `oncebox` npm package (`js/`): the rules of `oncebox-core` and the
//! store's statements of `oncebox-sql`, bound with napi-rs. Nothing here re-implements a rule:
//! key validation, `businessKey`/`stepKey`, the RFC 8785 request hash, the refusals of numbers
//! beyond ±2^53 and of U+0000, redaction and the TOML config are the Rust code itself — the same
//! the Python package binds.
//!
//! JSON crosses the boundary as text, read here with [`oncebox_core::json::parse`] exactly as
//! the HTTP API reads a request body (JavaScript's own `JSON.parse` would round an integer
//! beyond ±2^53 silently). A refusal is thrown as an `Error` whose message is a JSON object —
//! `{"kind": "InvalidIntent" | "ConfigError", "field": …, "reason": …}` — that the package's
//! TypeScript turns into its typed errors.

use std::time::SystemTime;

use napi::{Error, Result};
use napi_derive::napi;
use oncebox_core::config::Config as CoreConfig;
use oncebox_core::intake::Rules as CoreRules;
use oncebox_core::json::{self, JsonError};
use oncebox_core::redact::RedactionKeys;
use oncebox_core::{InvalidIntent, NewIntent, hash, key};
use serde_json::{Value, json};

/// A refusal of `kind` about `field`, thrown to JavaScript.
fn refusal(kind: &str, field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::from_reason(
        json!({"kind": kind, "field": field.into(), "reason": reason.into()}).to_string(),
    )
}

fn invalid(e: InvalidIntent) -> Error {
    refusal("InvalidIntent", e.field, e.reason)
}

/// Reads `text` as the JSON value of `field`: a number beyond ±2^53 is named by its pointer
/// inside the field, as the HTTP API names it.
fn parse_json(field: &str, text: &str) -> Result<Value> {
    json::parse(text.as_bytes()).map_err(|e| {
        let at = match &e {
            JsonError::UnsafeNumber { pointer } => format!("{field}{pointer}"),
            JsonError::Syntax(_) => field.to_owned(),
        };
        refusal("InvalidIntent", at, e.to_string())
    })
}

/// Refuses an unusable idempotency key, naming the field `idempotency_key`.
#[napi]
pub fn validate_key(key: String) -> Result<()> {
    key::validate_key(&key).map_err(|e| refusal("InvalidIntent", "idempotency_key", e.to_string()))
}

/// Hex SHA-256 of `tenant|action|businessId|version`: the key of a business operation.
#[napi]
pub fn business_key(
    tenant: String,
    action: String,
    business_id: String,
    version: String,
) -> String {
    key::business_key(&tenant, &action, &business_id, &version)
}

/// What every destination sees as the identity of `tenant`'s intent `key`: unique across
/// tenants (`TENANT:KEY`, or a digest of both).
#[napi]
pub fn delivery_key(tenant: String, key: String) -> String {
    oncebox_core::delivery_key(&tenant, &key)
}

/// The principal a writer names itself (`user:NAME`), as the journal records it; a name that
/// cannot be one is refused as an `InvalidIntent` naming `principal`.
#[napi]
pub fn principal(name: String) -> Result<String> {
    oncebox_core::Principal::named("principal", &name)
        .map(|p| p.to_string())
        .map_err(|e| refusal("InvalidIntent", e.field, e.reason))
}

/// Hex SHA-256 of `session:step:tool:` and the JCS form of the arguments (JSON text): the key of
/// an agent's tool call at one step of a run. `step` is a whole number from 0 to 2^53.
#[napi]
pub fn step_key(session: String, step: f64, tool: String, arguments: String) -> Result<String> {
    if !(step.is_finite()
        && step >= 0.0
        && step.fract() == 0.0
        && step <= hash::MAX_SAFE_INTEGER as f64)
    {
        return Err(refusal(
            "InvalidIntent",
            "step",
            "must be a whole number from 0 to 2^53",
        ));
    }
    let value = parse_json("arguments", &arguments)?;
    // Exact: a whole number no larger than 2^53.
    Ok(key::step_key(&session, step as u64, &tool, &value))
}

/// RFC 8785 canonical JSON of the JSON text given.
#[napi]
pub fn canonical_json(document: String) -> Result<String> {
    Ok(hash::canonical_json(&parse_json("document", &document)?))
}

/// The request hash of `action` with `arguments` (JSON text) as given — no redaction.
#[napi]
pub fn request_hash(action: String, arguments: String) -> Result<String> {
    Ok(hash::request_hash(
        &action,
        &parse_json("arguments", &arguments)?,
    ))
}

fn unix(at: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs_f64(at.max(0.0))
}

/// The identity of a tool call that names no key and no run (`oncebox_core::CallIdentity`):
/// one intent per dedupe window, from its first call. Times are Unix seconds.
#[napi]
pub struct CallIdentity {
    inner: oncebox_core::CallIdentity,
}

#[napi]
impl CallIdentity {
    /// The identity of `tool` called with `arguments` (JSON text), identified by the values at
    /// `pointers` (all the arguments when absent), one intent per `window` seconds.
    #[napi(constructor)]
    pub fn new(
        tool: String,
        arguments: String,
        pointers: Option<Vec<String>>,
        window: f64,
    ) -> Result<CallIdentity> {
        if !(window.is_finite() && window >= 1.0) {
            return Err(refusal(
                "InvalidIntent",
                "dedupe_window",
                "must be at least a second",
            ));
        }
        let arguments = parse_json("arguments", &arguments)?;
        let pointers: Option<Vec<&str>> = pointers
            .as_ref()
            .map(|p| p.iter().map(String::as_str).collect());
        oncebox_core::CallIdentity::of(
            &tool,
            &arguments,
            pointers.as_deref(),
            std::time::Duration::from_secs_f64(window),
        )
        .map(|inner| CallIdentity { inner })
        .map_err(invalid)
    }

    /// The dedupe window, in seconds.
    #[napi(getter)]
    pub fn window(&self) -> f64 {
        self.inner.window().as_secs_f64()
    }

    /// The key of the window `at` falls in, and the key of the one before it.
    #[napi]
    pub fn keys_at(&self, at: f64) -> Vec<String> {
        let (current, previous) = self.inner.keys_at(unix(at));
        vec![current, previous]
    }

    /// The key a call at `at` takes, given when the previous window's intent was created (if
    /// it exists).
    #[napi]
    pub fn key_for(&self, at: f64, previous_created: Option<f64>) -> String {
        self.inner.key_for(unix(at), previous_created.map(unix))
    }
}

/// What a new intent is recorded as, and what its action's approval policy asks of it.
#[napi(object)]
pub struct Prepared {
    /// The arguments after redaction, as JSON text: what the journal keeps.
    pub payload: String,
    /// Whether redaction changed them (the outbox then holds the originals for delivery).
    pub redacted: bool,
    /// The request hash.
    pub request_hash: String,
    /// Distinct people who must approve it before it is sent; absent when none must.
    pub approvals: Option<u32>,
    /// How long they have, in seconds.
    pub approval_window: Option<f64>,
}

/// The lane an action's intents with an ordering key queue in.
#[napi(object)]
pub struct Lane {
    /// The destination's name.
    pub destination: String,
    /// Whether that destination's lanes skip a failed head.
    pub skip_failed: bool,
}

/// The rules of an intake: configured actions, their redaction, the keys that hash.
#[napi]
pub struct Rules {
    inner: CoreRules,
}

#[napi]
impl Rules {
    /// Rules for the TOML configuration `config`, hashing with `redactionKeys` (the
    /// `ONCEBOX_REDACTION_KEYS` format, `id:secret[,older…]`); absent, that variable is read.
    #[napi(constructor)]
    pub fn new(config: String, redaction_keys: Option<String>) -> Result<Rules> {
        let config = CoreConfig::from_toml(&config)
            .map_err(|e| refusal("ConfigError", e.field, e.reason))?;
        let keys = match redaction_keys {
            Some(text) => RedactionKeys::parse(&text).map(Some),
            None => RedactionKeys::from_env(),
        }
        .map_err(|e| refusal("ConfigError", "redaction_keys", e))?;
        CoreRules::new(&config, keys)
            .map(|inner| Rules { inner })
            .map_err(|e| {
                refusal(
                    "ConfigError",
                    format!("actions.{}.redact", e.action),
                    e.to_string(),
                )
            })
    }

    /// The configured action names, in order.
    #[napi(getter)]
    pub fn actions(&self) -> Vec<String> {
        self.inner.actions().map(str::to_owned).collect()
    }

    /// Checks every field of a new intent (`arguments` as JSON text; the deadline is checked
    /// by the caller) and returns what it is recorded as.
    #[napi]
    #[allow(clippy::too_many_arguments)]
    pub fn prepare(
        &self,
        tenant: String,
        key: String,
        action: String,
        arguments: String,
        business_ref: Option<String>,
        run_id: Option<String>,
        step: Option<String>,
        ordering_key: Option<String>,
    ) -> Result<Prepared> {
        let intent = NewIntent {
            tenant_id: tenant,
            idempotency_key: key,
            action,
            arguments: parse_json("arguments", &arguments)?,
            business_ref,
            run_id,
            step,
            deadline: None::<SystemTime>,
            ordering_key,
        };
        let recorded = self.inner.prepare(&intent).map_err(invalid)?;
        let approval = self
            .inner
            .approval(&intent.action, &intent.arguments)
            .map_err(invalid)?;
        Ok(Prepared {
            payload: recorded.payload.to_string(),
            redacted: recorded.redacted,
            request_hash: recorded.request_hash,
            approvals: approval.map(|a| a.approvals.get()),
            approval_window: approval.map(|a| a.window.as_secs_f64()),
        })
    }

    /// The lane `action`'s intents with an ordering key queue in.
    #[napi]
    pub fn lane(&self, action: String) -> Result<Lane> {
        self.inner
            .lane(&action)
            .map(|l| Lane {
                destination: l.destination.clone(),
                skip_failed: l.skip_failed,
            })
            .map_err(invalid)
    }

    /// The identity of a call of `action` with `arguments` (JSON text) that names no key and no
    /// run: its `[actions.X.tool]` key and dedupe window, or all the arguments and a day.
    #[napi]
    pub fn call_identity(&self, action: String, arguments: String) -> Result<CallIdentity> {
        let arguments = parse_json("arguments", &arguments)?;
        self.inner
            .call_identity(&action, &arguments)
            .map(|inner| CallIdentity { inner })
            .map_err(invalid)
    }

    /// Whether a submit whose key already names a recorded intent is a replay of it.
    #[napi]
    pub fn is_replay(
        &self,
        action: String,
        arguments: String,
        submitted_hash: String,
        recorded_hash: String,
        recorded_payload: String,
    ) -> Result<bool> {
        let arguments = parse_json("arguments", &arguments)?;
        let payload = json::parse(recorded_payload.as_bytes())
            .map_err(|e| Error::from_reason(format!("the recorded payload: {e}")))?;
        Ok(self.inner.is_replay(
            &action,
            &arguments,
            &submitted_hash,
            &recorded_hash,
            &payload,
        ))
    }
}

/// The store's statements the package runs, as the Rust store runs them (`$n` placeholders),
/// and the names it uses.
#[napi(object)]
pub struct Statements {
    /// The submit statement.
    pub submit: String,
    /// The submit statement of an intent with an ordering key.
    pub submit_ordered: String,
    /// One intent by its tenant and key.
    pub intent_by_key: String,
    /// The channel idle workers listen on.
    pub outbox_channel: String,
    /// The largest integer the request hash accepts (2^53).
    pub max_safe_integer: f64,
    /// The environment variable holding the redaction keys.
    pub redaction_keys_env: String,
    /// This binding's version.
    pub version: String,
}

/// The statements and names (see [`Statements`]).
#[napi]
pub fn statements() -> Statements {
    Statements {
        submit: oncebox_sql::SUBMIT.to_owned(),
        submit_ordered: oncebox_sql::SUBMIT_ORDERED.to_owned(),
        intent_by_key: oncebox_sql::INTENT_BY_KEY.to_owned(),
        outbox_channel: oncebox_sql::OUTBOX_CHANNEL.to_owned(),
        max_safe_integer: hash::MAX_SAFE_INTEGER as f64,
        redaction_keys_env: RedactionKeys::ENV.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
    }
}
