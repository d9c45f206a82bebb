//! The native part of the `oncebox` npm package (`js/`): the rules of `oncebox-core` and the
//! store's statements of `oncebox-sql`, bound with napi-rs. Nothing here re-implements a rule:
//! key validation, `businessKey`/`stepKey`, the RFC 8785 request hash, the refusals of numbers
//! beyond ±2^53 and of U+0000, redaction and the TOML config are the Rust code itself — the same
//! the Python package binds.
//!
//! JSON crosses the boundary as text, read here with [`oncebox_core::json::parse`] exactly as
//! the HTTP API reads a request body (JavaScript's own `JSON.parse` would round an integer
//! beyond ±2^53 silently). A refusal is thrown as an `Error` whose `code` is a [`RefusalCode`]
//! (`InvalidIntent` or `ConfigError`), with `field` and `reason` properties and the message
//! `field: reason`; the package's TypeScript turns it into its typed error.
//!
//! What the core knows and the package uses — the statuses and their sets, what a tool call
//! raises for each ending, the clients' defaults, the submit statements' parameter lists — is
//! exported by [`facts`], and the types of all of it are generated from this file by
//! `@napi-rs/cli` (`binding/index.d.ts`).

use std::time::SystemTime;

use napi::bindgen_prelude::JsObjectValue;
use napi::{Env, Error, Result, Status as NapiStatus};
use napi_derive::napi;
use oncebox_core::config::Config as CoreConfig;
use oncebox_core::intake::Rules as CoreRules;
use oncebox_core::json::{self, JsonError};
use oncebox_core::redact::RedactionKeys;
use oncebox_core::{InvalidIntent, NewIntent, hash, key};
use serde_json::Value;

/// The `code` of an error the addon throws for a refusal.
#[napi(string_enum)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCode {
    /// A field of an intent (or of a call) is not acceptable.
    InvalidIntent,
    /// The TOML configuration or the redaction keys cannot be used.
    ConfigError,
}

impl RefusalCode {
    fn as_str(self) -> &'static str {
        match self {
            RefusalCode::InvalidIntent => "InvalidIntent",
            RefusalCode::ConfigError => "ConfigError",
        }
    }
}

/// A refusal, before it is thrown.
struct Refusal {
    code: RefusalCode,
    field: String,
    reason: String,
}

fn refusal(code: RefusalCode, field: impl Into<String>, reason: impl Into<String>) -> Refusal {
    Refusal {
        code,
        field: field.into(),
        reason: reason.into(),
    }
}

fn invalid(e: InvalidIntent) -> Refusal {
    refusal(RefusalCode::InvalidIntent, e.field, e.reason)
}

/// Throws `r` as an `Error` with `code`, `field` and `reason`, and returns what tells napi-rs
/// that an exception is pending.
fn throw(env: &Env, r: Refusal) -> Error {
    let thrown = env
        .create_error(Error::new(
            NapiStatus::GenericFailure,
            format!("{}: {}", r.field, r.reason),
        ))
        .and_then(|mut error| {
            error.set_named_property("code", r.code.as_str())?;
            error.set_named_property("field", r.field.as_str())?;
            error.set_named_property("reason", r.reason.as_str())?;
            env.throw(error)
        });
    match thrown {
        Ok(()) => Error::new(NapiStatus::PendingException, r.reason),
        Err(e) => e,
    }
}

/// Runs `f`, throwing its refusal.
fn refusing<T>(env: &Env, f: impl FnOnce() -> std::result::Result<T, Refusal>) -> Result<T> {
    f().map_err(|r| throw(env, r))
}

/// Reads `text` as the JSON value of `field`: a number beyond ±2^53 is named by its pointer
/// inside the field, as the HTTP API names it.
fn parse_json(field: &str, text: &str) -> std::result::Result<Value, Refusal> {
    json::parse(text.as_bytes()).map_err(|e| {
        let at = match &e {
            JsonError::UnsafeNumber { pointer } => format!("{field}{pointer}"),
            JsonError::Syntax(_) => field.to_owned(),
        };
        refusal(RefusalCode::InvalidIntent, at, e.to_string())
    })
}

/// Refuses an unusable idempotency key, naming the field `idempotency_key`.
#[napi]
pub fn validate_key(env: &Env, key: String) -> Result<()> {
    refusing(env, || {
        key::validate_key(&key)
            .map_err(|e| refusal(RefusalCode::InvalidIntent, "idempotency_key", e.to_string()))
    })
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
pub fn principal(env: &Env, name: String) -> Result<String> {
    refusing(env, || {
        oncebox_core::Principal::named("principal", &name)
            .map(|p| p.to_string())
            .map_err(|e| refusal(RefusalCode::InvalidIntent, e.field, e.reason))
    })
}

/// Hex SHA-256 of `session:step:tool:` and the JCS form of the arguments (JSON text): the key of
/// an agent's tool call at one step of a run. `step` is a whole number from 0 to 2^53.
#[napi]
pub fn step_key(
    env: &Env,
    session: String,
    step: f64,
    tool: String,
    arguments: String,
) -> Result<String> {
    refusing(env, || {
        if !(step.is_finite()
            && step >= 0.0
            && step.fract() == 0.0
            && step <= hash::MAX_SAFE_INTEGER as f64)
        {
            return Err(refusal(
                RefusalCode::InvalidIntent,
                "step",
                "must be a whole number from 0 to 2^53",
            ));
        }
        let value = parse_json("arguments", &arguments)?;
        // Exact: a whole number no larger than 2^53.
        Ok(key::step_key(&session, step as u64, &tool, &value))
    })
}

/// RFC 8785 canonical JSON of the JSON text given.
#[napi]
pub fn canonical_json(env: &Env, document: String) -> Result<String> {
    refusing(env, || {
        Ok(hash::canonical_json(&parse_json("document", &document)?))
    })
}

/// The request hash of `action` with `arguments` (JSON text) as given — no redaction.
#[napi]
pub fn request_hash(env: &Env, action: String, arguments: String) -> Result<String> {
    refusing(env, || {
        Ok(hash::request_hash(
            &action,
            &parse_json("arguments", &arguments)?,
        ))
    })
}

fn unix(at: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs_f64(at.max(0.0))
}

/// How a tool call that names no key and no run is identified.
#[napi(object)]
pub struct CallIdentityOptions {
    /// The tool (the action).
    pub tool: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
    /// JSON pointers to the arguments that identify the call; all of them when absent.
    pub pointers: Option<Vec<String>>,
    /// Within how many seconds an identical call is the same intent (at least 1).
    pub window: f64,
}

/// The identity of a tool call that names no key and no run (`oncebox_core::CallIdentity`):
/// one intent per dedupe window, from its first call. Times are Unix seconds.
#[napi]
pub struct CallIdentity {
    inner: oncebox_core::CallIdentity,
}

#[napi]
impl CallIdentity {
    /// The identity of a call, as `options` says.
    #[napi(constructor)]
    pub fn new(env: &Env, options: CallIdentityOptions) -> Result<CallIdentity> {
        refusing(env, || {
            let CallIdentityOptions {
                tool,
                arguments,
                pointers,
                window,
            } = options;
            if !(window.is_finite() && window >= 1.0) {
                return Err(refusal(
                    RefusalCode::InvalidIntent,
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
        })
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

/// One intent's fields, as [`Rules::prepare`] checks them.
#[napi(object)]
pub struct IntentFields {
    /// The tenant.
    pub tenant: String,
    /// The idempotency key.
    pub key: String,
    /// A configured action.
    pub action: String,
    /// The arguments, as JSON text.
    pub arguments: String,
    /// The caller's business reference.
    pub business_ref: Option<String>,
    /// The agent run.
    pub run_id: Option<String>,
    /// The step of that run.
    pub step: Option<String>,
    /// The ordering key.
    pub ordering_key: Option<String>,
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

/// A submit whose key already names a recorded intent.
#[napi(object)]
pub struct Recorded {
    /// The submitted action.
    pub action: String,
    /// The submitted arguments, as JSON text.
    pub arguments: String,
    /// The submitted request hash.
    pub submitted_hash: String,
    /// The hash the key was recorded with.
    pub recorded_hash: String,
    /// The recorded (redacted) arguments, as JSON text.
    pub recorded_payload: String,
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
    pub fn new(env: &Env, config: String, redaction_keys: Option<String>) -> Result<Rules> {
        refusing(env, || {
            let config = CoreConfig::from_toml(&config)
                .map_err(|e| refusal(RefusalCode::ConfigError, e.field, e.reason))?;
            let keys = match redaction_keys {
                Some(text) => RedactionKeys::parse(&text).map(Some),
                None => RedactionKeys::from_env(),
            }
            .map_err(|e| refusal(RefusalCode::ConfigError, "redaction_keys", e.to_string()))?;
            CoreRules::new(&config, keys)
                .map(|inner| Rules { inner })
                .map_err(|e| {
                    refusal(
                        RefusalCode::ConfigError,
                        format!("actions.{}.redact", e.action),
                        e.to_string(),
                    )
                })
        })
    }

    /// The configured action names, in order.
    #[napi(getter)]
    pub fn actions(&self) -> Vec<String> {
        self.inner.actions().map(str::to_owned).collect()
    }

    /// Checks every field of a new intent (the deadline is checked by the caller) and returns
    /// what it is recorded as.
    #[napi]
    pub fn prepare(&self, env: &Env, fields: IntentFields) -> Result<Prepared> {
        refusing(env, || {
            let intent = NewIntent {
                tenant_id: fields.tenant,
                idempotency_key: fields.key,
                action: fields.action,
                arguments: parse_json("arguments", &fields.arguments)?,
                business_ref: fields.business_ref,
                run_id: fields.run_id,
                step: fields.step,
                deadline: None::<SystemTime>,
                ordering_key: fields.ordering_key,
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
        })
    }

    /// The lane `action`'s intents with an ordering key queue in.
    #[napi]
    pub fn lane(&self, env: &Env, action: String) -> Result<Lane> {
        refusing(env, || {
            self.inner
                .lane(&action)
                .map(|l| Lane {
                    destination: l.destination.clone(),
                    skip_failed: l.skip_failed,
                })
                .map_err(invalid)
        })
    }

    /// The identity of a call of `action` with `arguments` (JSON text) that names no key and no
    /// run: its `[actions.X.tool]` key and dedupe window, or all the arguments and a day.
    #[napi]
    pub fn call_identity(
        &self,
        env: &Env,
        action: String,
        arguments: String,
    ) -> Result<CallIdentity> {
        refusing(env, || {
            let arguments = parse_json("arguments", &arguments)?;
            self.inner
                .call_identity(&action, &arguments)
                .map(|inner| CallIdentity { inner })
                .map_err(invalid)
        })
    }

    /// Whether a submit whose key already names a recorded intent is a replay of it.
    #[napi]
    pub fn is_replay(&self, env: &Env, submit: Recorded) -> Result<bool> {
        refusing(env, || {
            let arguments = parse_json("arguments", &submit.arguments)?;
            let payload = parse_json("recorded_payload", &submit.recorded_payload)?;
            Ok(self.inner.is_replay(
                &submit.action,
                &arguments,
                &submit.submitted_hash,
                &submit.recorded_hash,
                &payload,
            ))
        })
    }
}

/// Where an intent stands: the journal's statuses, as `oncebox-core` names them.
#[napi(string_enum = "snake_case")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Held for people to approve it.
    AwaitingApproval,
    /// Waiting for a worker.
    Pending,
    /// A worker may be calling the destination.
    InFlight,
    /// The request may have had an effect; nobody knows yet.
    Unknown,
    /// A worker is looking the effect up.
    Reconciling,
    /// A person must decide.
    NeedsReview,
    /// The effect happened exactly once.
    Succeeded,
    /// The effect did not and will not happen.
    Failed,
    /// Cancelled before dispatch.
    Cancelled,
    /// Its time ran out.
    Expired,
    /// A person rejected it.
    Rejected,
}

impl From<oncebox_core::Status> for Status {
    /// Exhaustive: a status added to the core does not compile here until it is added above.
    fn from(s: oncebox_core::Status) -> Status {
        use oncebox_core::Status as S;
        match s {
            S::AwaitingApproval => Status::AwaitingApproval,
            S::Pending => Status::Pending,
            S::InFlight => Status::InFlight,
            S::Unknown => Status::Unknown,
            S::Reconciling => Status::Reconciling,
            S::NeedsReview => Status::NeedsReview,
            S::Succeeded => Status::Succeeded,
            S::Failed => Status::Failed,
            S::Cancelled => Status::Cancelled,
            S::Expired => Status::Expired,
            S::Rejected => Status::Rejected,
        }
    }
}

/// One status, and the sets it belongs to.
#[napi(object)]
pub struct StatusFacts {
    /// The status.
    pub status: Status,
    /// Its name (the core's spelling).
    pub name: String,
    /// It never changes again.
    pub terminal: bool,
    /// Terminal, or waiting for a person: nothing more happens by itself.
    pub settled: bool,
    /// Only a person moves it on.
    pub waits_for_a_person: bool,
    /// What a tool call whose intent stands here raises, when it does not return it.
    pub ending: Option<EndingFacts>,
}

/// What a tool call raises for an intent that did not succeed.
#[napi(object)]
pub struct EndingFacts {
    /// The error class.
    pub error: String,
    /// The message; `{status}` stands for the status's name.
    pub message: String,
    /// Whether the intent's `error.detail` follows the message after `": "`.
    pub with_detail: bool,
}

/// The HTTP clients' defaults.
#[napi(object)]
pub struct ClientDefaults {
    /// Tries in all, the first included.
    pub attempts: u32,
    /// The first backoff, in milliseconds.
    pub min_delay_ms: f64,
    /// The longest backoff (and longest Retry-After honoured), in milliseconds.
    pub max_delay_ms: f64,
    /// The per-request timeout, in milliseconds.
    pub timeout_ms: f64,
    /// The longest single long-poll the server allows, in seconds.
    pub max_wait_seconds: u32,
    /// How long a tool call waits for its intent to settle, in milliseconds.
    pub tool_wait_ms: f64,
}

/// What the core knows and the package uses.
#[napi(object)]
pub struct Facts {
    /// Every status, in the core's order.
    pub statuses: Vec<StatusFacts>,
    /// The HTTP clients' defaults.
    pub client_defaults: ClientDefaults,
    /// The submit statement's parameters by name, in order.
    pub submit_params: Vec<String>,
    /// The ordered submit statement's parameters by name, in order.
    pub submit_ordered_params: Vec<String>,
}

fn millis(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// What the core knows (see [`Facts`]).
#[napi]
pub fn facts() -> Facts {
    let d = oncebox_core::CLIENT_DEFAULTS;
    Facts {
        statuses: oncebox_core::Status::ALL
            .into_iter()
            .map(|s| StatusFacts {
                status: s.into(),
                name: s.as_str().to_owned(),
                terminal: s.is_terminal(),
                settled: s.is_settled(),
                waits_for_a_person: s.waits_for_a_person(),
                ending: s.ending().map(|e| EndingFacts {
                    error: e.error.to_owned(),
                    message: e.message.to_owned(),
                    with_detail: e.with_detail,
                }),
            })
            .collect(),
        client_defaults: ClientDefaults {
            attempts: d.attempts,
            min_delay_ms: millis(d.min_delay),
            max_delay_ms: millis(d.max_delay),
            timeout_ms: millis(d.timeout),
            max_wait_seconds: u32::try_from(d.max_wait_secs).unwrap_or(u32::MAX),
            tool_wait_ms: millis(d.tool_wait),
        },
        submit_params: oncebox_sql::SUBMIT_PARAMS.map(str::to_owned).to_vec(),
        submit_ordered_params: oncebox_sql::SUBMIT_ORDERED_PARAMS
            .map(str::to_owned)
            .to_vec(),
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
