//! `oncebox._native`: the Rust rules of `oncebox-core` and the store's statements of
//! `oncebox-sql`, bound for the Python package (`python/oncebox`). Nothing here re-implements a
//! rule: key validation, `business_key`/`step_key`, the RFC 8785 request hash, the refusals of
//! numbers beyond ±2^53 and of U+0000, redaction and the TOML config are the Rust code itself.
//!
//! JSON crosses the boundary as text (Python's `json.dumps`), read here with
//! [`oncebox_core::json::parse`] exactly as the HTTP API reads a request body. The module holds
//! the root of the package's exceptions and the two it raises itself ([`ERRORS`]);
//! `oncebox._errors` builds the rest on them, so that Python code catches one hierarchy.

use std::collections::BTreeMap;
use std::time::SystemTime;

use oncebox_core::config::Config as CoreConfig;
use oncebox_core::intake::Rules;
use oncebox_core::json::{self, JsonError};
use oncebox_core::redact::RedactionKeys;
use oncebox_core::{NewIntent, hash, key};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyTuple};
use serde_json::Value;

// The exceptions this module raises, defined once in Python (`oncebox._errors`) and imported
// here when first raised: Rust and Python raise the very same classes.
pyo3::import_exception!(oncebox._errors, InvalidIntent);
pyo3::import_exception!(oncebox._errors, ConfigError);

fn invalid(e: oncebox_core::InvalidIntent) -> PyErr {
    InvalidIntent::new_err((e.field, e.reason))
}

fn config_error(field: impl Into<String>, reason: String) -> PyErr {
    ConfigError::new_err((field.into(), reason))
}

/// Reads `text` as the JSON value of `field` (`arguments`, say): a number beyond ±2^53 is
/// named by its pointer inside the field, as the HTTP API names it.
fn parse_json(field: &str, text: &str) -> PyResult<Value> {
    json::parse(text.as_bytes()).map_err(|e| {
        let at = match &e {
            JsonError::UnsafeNumber { pointer } => format!("{field}{pointer}"),
            JsonError::Syntax(_) => field.to_owned(),
        };
        InvalidIntent::new_err((at, e.to_string()))
    })
}

/// Refuses an unusable idempotency key, naming the field `idempotency_key`.
#[pyfunction]
fn validate_key(key: &str) -> PyResult<()> {
    key::validate_key(key).map_err(|e| InvalidIntent::new_err(("idempotency_key", e.to_string())))
}

/// `business_key(tenant=, action=, business_id=, version=)`: hex SHA-256 of
/// `tenant|action|business_id|version`.
#[pyfunction]
#[pyo3(signature = (*, tenant, action, business_id, version))]
fn business_key(tenant: &str, action: &str, business_id: &str, version: &str) -> String {
    key::business_key(tenant, action, business_id, version)
}

/// `delivery_key(tenant=, key=)`: what every destination sees as the identity of `tenant`'s
/// intent `key` (unique across tenants).
#[pyfunction]
#[pyo3(signature = (*, tenant, key))]
fn delivery_key(tenant: &str, key: &str) -> String {
    oncebox_core::delivery_key(tenant, key)
}

/// `principal(name)`: the principal a writer names itself (`user:NAME`), as the journal records
/// it; a name that cannot be one raises `InvalidIntent` naming `principal`.
#[pyfunction]
fn principal(name: &str) -> PyResult<String> {
    oncebox_core::Principal::named("principal", name)
        .map(|p| p.to_string())
        .map_err(|e| InvalidIntent::new_err((e.field, e.reason)))
}

/// `step_key(session=, step=, tool=, arguments=)`: hex SHA-256 of `session:step:tool:` and the
/// JCS form of the arguments (JSON text).
#[pyfunction]
#[pyo3(signature = (*, session, step, tool, arguments))]
fn step_key(session: &str, step: u64, tool: &str, arguments: &str) -> PyResult<String> {
    let value = parse_json("arguments", arguments)?;
    Ok(key::step_key(session, step, tool, &value))
}

/// RFC 8785 canonical JSON of the JSON text given.
#[pyfunction]
fn canonical_json(document: &str) -> PyResult<String> {
    Ok(hash::canonical_json(&parse_json("document", document)?))
}

/// The request hash of `action` with `arguments` (JSON text) as given — no redaction; for the
/// hash an intent is recorded with, see `Intake.recorded`.
#[pyfunction]
#[pyo3(signature = (*, action, arguments))]
fn request_hash(action: &str, arguments: &str) -> PyResult<String> {
    Ok(hash::request_hash(
        action,
        &parse_json("arguments", arguments)?,
    ))
}

/// The identity of a tool call that names no key and no run (`oncebox_core::CallIdentity`):
/// one intent per dedupe window, from its first call. Times are Unix seconds.
#[pyclass(frozen, name = "CallIdentity", module = "oncebox._native")]
struct PyCallIdentity {
    inner: oncebox_core::CallIdentity,
}

fn unix(at: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs_f64(at.max(0.0))
}

#[pymethods]
impl PyCallIdentity {
    /// The identity of tool `tool` called with `arguments` (JSON text), identified by the
    /// values at `pointers` (all the arguments when `None`), one intent per `window` seconds.
    #[new]
    #[pyo3(signature = (*, tool, arguments, pointers=None, window=86400.0))]
    fn new(
        tool: &str,
        arguments: &str,
        pointers: Option<Vec<String>>,
        window: f64,
    ) -> PyResult<PyCallIdentity> {
        if !(window.is_finite() && window >= 1.0) {
            return Err(InvalidIntent::new_err((
                "dedupe_window",
                "must be at least a second",
            )));
        }
        let arguments = parse_json("arguments", arguments)?;
        let pointers: Option<Vec<&str>> = pointers
            .as_ref()
            .map(|p| p.iter().map(String::as_str).collect());
        oncebox_core::CallIdentity::of(
            tool,
            &arguments,
            pointers.as_deref(),
            std::time::Duration::from_secs_f64(window),
        )
        .map(|inner| PyCallIdentity { inner })
        .map_err(invalid)
    }

    /// The dedupe window, in seconds.
    #[getter]
    fn window(&self) -> f64 {
        self.inner.window().as_secs_f64()
    }

    /// The key of the window `at` falls in, and the key of the one before it.
    fn keys_at(&self, at: f64) -> (String, String) {
        self.inner.keys_at(unix(at))
    }

    /// The key a call at `at` takes, given when the previous window's intent was created (if
    /// it exists).
    #[pyo3(signature = (at, previous_created=None))]
    fn key_for(&self, at: f64, previous_created: Option<f64>) -> String {
        self.inner.key_for(unix(at), previous_created.map(unix))
    }
}

/// The operator's configuration, read by the same loader as `oncebox serve` and `worker`.
#[pyclass(frozen, name = "Config", module = "oncebox._native")]
struct PyConfig {
    inner: CoreConfig,
}

#[pymethods]
impl PyConfig {
    /// Parses and validates a TOML document; a bad value raises `ConfigError` naming its dotted
    /// path (or line and column).
    #[staticmethod]
    fn from_toml(text: &str) -> PyResult<PyConfig> {
        CoreConfig::from_toml(text)
            .map(|inner| PyConfig { inner })
            .map_err(|e| config_error(e.field, e.reason))
    }

    /// The configured action names, in order.
    #[getter]
    fn actions(&self) -> Vec<String> {
        self.inner.actions.keys().cloned().collect()
    }
}

/// What an intent is recorded as, and what its action's approval policy asks of it.
#[pyclass(frozen, get_all, name = "Prepared", module = "oncebox._native")]
struct PyPrepared {
    /// The arguments after redaction (JSON text): what the journal keeps.
    payload: String,
    /// Whether redaction changed them (the outbox then holds the originals for delivery).
    redacted: bool,
    /// The request hash over the action and the redacted arguments.
    request_hash: String,
    /// How many distinct people must approve it before it is sent; `None` when none must.
    approvals: Option<u32>,
    /// How many seconds they have.
    approval_window: Option<f64>,
}

impl PyPrepared {
    fn of(
        r: oncebox_core::intake::Recorded,
        approval: Option<oncebox_core::intake::ApprovalNeeded>,
    ) -> Self {
        PyPrepared {
            payload: r.payload.to_string(),
            redacted: r.redacted,
            request_hash: r.request_hash,
            approvals: approval.map(|a| a.approvals.get()),
            approval_window: approval.map(|a| a.window.as_secs_f64()),
        }
    }
}

/// The lane an action's intents with an ordering key queue in.
#[pyclass(frozen, get_all, name = "Lane", module = "oncebox._native")]
struct PyLane {
    /// The destination's name.
    destination: String,
    /// Whether that destination's lanes go on past a failed head (`on_failure = "skip"`).
    skip_failed: bool,
}

/// The rules of an intake: configured actions, their redaction, the keys that hash.
#[pyclass(frozen, name = "Rules", module = "oncebox._native")]
struct PyRules {
    inner: Rules,
}

#[pymethods]
impl PyRules {
    /// Rules for `config`, hashing with `redaction_keys` (the `ONCEBOX_REDACTION_KEYS` format,
    /// `id:secret[,older…]`); `None` reads that variable, as the Rust intake does.
    #[new]
    #[pyo3(signature = (config, *, redaction_keys=None))]
    fn new(config: &PyConfig, redaction_keys: Option<&str>) -> PyResult<PyRules> {
        let keys = match redaction_keys {
            Some(text) => RedactionKeys::parse(text).map(Some),
            None => RedactionKeys::from_env(),
        }
        .map_err(|e| config_error("redaction_keys", e.to_string()))?;
        Rules::new(&config.inner, keys)
            .map(|inner| PyRules { inner })
            .map_err(|e| config_error(format!("actions.{}.redact", e.action), e.to_string()))
    }

    /// The configured action names, in order.
    #[getter]
    fn actions(&self) -> Vec<String> {
        self.inner.actions().map(str::to_owned).collect()
    }

    /// Checks every field of a new intent (the deadline, a Python `datetime`, is checked by the
    /// caller) and returns what it is recorded as, and what its action's approval policy asks
    /// of it.
    #[pyo3(signature = (*, tenant, key, action, arguments, business_ref=None, run_id=None, step=None, ordering_key=None))]
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        py: Python<'_>,
        tenant: &str,
        key: &str,
        action: &str,
        arguments: &str,
        business_ref: Option<String>,
        run_id: Option<String>,
        step: Option<String>,
        ordering_key: Option<String>,
    ) -> PyResult<PyPrepared> {
        let intent = NewIntent {
            tenant_id: tenant.to_owned(),
            idempotency_key: key.to_owned(),
            action: action.to_owned(),
            arguments: parse_json("arguments", arguments)?,
            business_ref,
            run_id,
            step,
            deadline: None::<SystemTime>,
            ordering_key,
        };
        // Other threads' Python runs meanwhile (an orchestrator submits from many threads).
        let rules = &self.inner;
        py.detach(|| {
            let recorded = rules.prepare(&intent)?;
            let approval = rules.approval(&intent.action, &intent.arguments)?;
            Ok(PyPrepared::of(recorded, approval))
        })
        .map_err(invalid)
    }

    /// The lane `action`'s intents with an ordering key queue in.
    fn lane(&self, action: &str) -> PyResult<PyLane> {
        self.inner
            .lane(action)
            .map(|l| PyLane {
                destination: l.destination.clone(),
                skip_failed: l.skip_failed,
            })
            .map_err(invalid)
    }

    /// The identity of a call of `action` with `arguments` (JSON text) that names no key and no
    /// run: its `[actions.X.tool]` key and dedupe window, or all the arguments and a day.
    #[pyo3(signature = (*, action, arguments))]
    fn call_identity(&self, action: &str, arguments: &str) -> PyResult<PyCallIdentity> {
        let arguments = parse_json("arguments", arguments)?;
        self.inner
            .call_identity(action, &arguments)
            .map(|inner| PyCallIdentity { inner })
            .map_err(invalid)
    }

    /// What `action` with `arguments` is recorded as (as `oncebox hash --config` prints it).
    #[pyo3(signature = (*, action, arguments))]
    fn recorded(&self, action: &str, arguments: &str) -> PyResult<PyPrepared> {
        let arguments = parse_json("arguments", arguments)?;
        self.inner
            .recorded(action, &arguments)
            .map(|r| PyPrepared::of(r, None))
            .map_err(invalid)
    }

    /// Whether a submit whose key already names a recorded intent is a replay of it.
    #[pyo3(signature = (*, action, arguments, submitted_hash, recorded_hash, recorded_payload))]
    fn is_replay(
        &self,
        action: &str,
        arguments: &str,
        submitted_hash: &str,
        recorded_hash: &str,
        recorded_payload: &str,
    ) -> PyResult<bool> {
        let arguments = parse_json("arguments", arguments)?;
        let payload = json::parse(recorded_payload.as_bytes())
            .map_err(|e| PyValueError::new_err(format!("the recorded payload: {e}")))?;
        Ok(self
            .inner
            .is_replay(action, &arguments, submitted_hash, recorded_hash, &payload))
    }
}

/// What a tool call raises for an intent that did not succeed (`oncebox_core::Ending`).
#[pyclass(frozen, get_all, name = "Ending", module = "oncebox._native")]
struct PyEnding {
    /// The exception class's name in `oncebox`.
    error: &'static str,
    /// The message; `{status}` stands for the status's name.
    message: &'static str,
    /// Whether the intent's `error["detail"]` follows the message after `": "`.
    with_detail: bool,
}

/// The HTTP clients' defaults (`oncebox_core::CLIENT_DEFAULTS`), in seconds.
#[pyclass(frozen, get_all, name = "ClientDefaults", module = "oncebox._native")]
struct PyClientDefaults {
    /// Tries in all, the first included.
    attempts: u32,
    /// The first backoff.
    min_delay: f64,
    /// The longest backoff, and the longest `Retry-After` honoured.
    max_delay: f64,
    /// The per-request timeout.
    timeout: f64,
    /// The longest single long-poll the server allows.
    max_wait: u64,
    /// How long a tool call waits for its intent to settle.
    tool_wait: f64,
}

/// The store's statements the binding runs, in Postgres's `$n` form and in psycopg's
/// `%(pn)s` form (which psycopg sends back as the `$n` text).
fn statements() -> PyResult<BTreeMap<&'static str, String>> {
    let mut out = BTreeMap::new();
    for (name, text) in [
        ("SUBMIT", oncebox_sql::SUBMIT),
        ("SUBMIT_ORDERED", oncebox_sql::SUBMIT_ORDERED),
        ("INTENT_BY_KEY", oncebox_sql::INTENT_BY_KEY),
    ] {
        let spelled = oncebox_sql::pyformat(text)
            .map_err(|e| PyValueError::new_err(format!("{name}: {e}")))?;
        out.insert(name, text.to_owned());
        out.insert(
            match name {
                "SUBMIT" => "SUBMIT_PYFORMAT",
                "SUBMIT_ORDERED" => "SUBMIT_ORDERED_PYFORMAT",
                _ => "INTENT_BY_KEY_PYFORMAT",
            },
            spelled,
        );
    }
    Ok(out)
}

/// Adds what the core knows about statuses: `Status` (a `str` enum of the core's statuses, in
/// its order), the sets `TERMINAL`, `SETTLED` and `WAITING_FOR_A_PERSON` (of `Status`), and
/// `ENDINGS` (status name to `Ending`).
fn add_statuses(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let members: Vec<(String, &str)> = oncebox_core::Status::ALL
        .iter()
        .map(|s| (s.as_str().to_uppercase(), s.as_str()))
        .collect();
    let options = PyDict::new(py);
    options.set_item("type", py.get_type::<pyo3::types::PyString>())?;
    options.set_item("module", "oncebox._native")?;
    let status = py
        .import("enum")?
        .getattr("Enum")?
        .call(("Status", members), Some(&options))?;
    status.setattr(
        "__doc__",
        "Where an intent stands: the journal's statuses, as oncebox-core names them.",
    )?;
    let set = |keep: fn(oncebox_core::Status) -> bool| -> PyResult<Bound<'_, PyFrozenSet>> {
        let members = oncebox_core::Status::ALL
            .into_iter()
            .filter(|s| keep(*s))
            .map(|s| status.call1((s.as_str(),)))
            .collect::<PyResult<Vec<_>>>()?;
        PyFrozenSet::new(py, &members)
    };
    m.add("TERMINAL", set(oncebox_core::Status::is_terminal)?)?;
    m.add("SETTLED", set(oncebox_core::Status::is_settled)?)?;
    m.add(
        "WAITING_FOR_A_PERSON",
        set(oncebox_core::Status::waits_for_a_person)?,
    )?;
    let endings = PyDict::new(py);
    for s in oncebox_core::Status::ALL {
        if let Some(e) = s.ending() {
            let ending = PyEnding {
                error: e.error,
                message: e.message,
                with_detail: e.with_detail,
            };
            endings.set_item(s.as_str(), Py::new(py, ending)?)?;
        }
    }
    m.add("ENDINGS", endings)?;
    m.add("Status", status)?;
    Ok(())
}

/// Adds the clients' defaults and the submit statements' parameter lists.
fn add_defaults(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let d = oncebox_core::CLIENT_DEFAULTS;
    let defaults = PyClientDefaults {
        attempts: d.attempts,
        min_delay: d.min_delay.as_secs_f64(),
        max_delay: d.max_delay.as_secs_f64(),
        timeout: d.timeout.as_secs_f64(),
        max_wait: d.max_wait_secs,
        tool_wait: d.tool_wait.as_secs_f64(),
    };
    m.add("CLIENT_DEFAULTS", Py::new(py, defaults)?)?;
    m.add(
        "SUBMIT_PARAMS",
        PyTuple::new(py, oncebox_sql::SUBMIT_PARAMS)?,
    )?;
    m.add(
        "SUBMIT_ORDERED_PARAMS",
        PyTuple::new(py, oncebox_sql::SUBMIT_ORDERED_PARAMS)?,
    )?;
    Ok(())
}

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(validate_key, m)?)?;
    m.add_function(wrap_pyfunction!(business_key, m)?)?;
    m.add_function(wrap_pyfunction!(delivery_key, m)?)?;
    m.add_function(wrap_pyfunction!(principal, m)?)?;
    m.add_function(wrap_pyfunction!(step_key, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_json, m)?)?;
    m.add_function(wrap_pyfunction!(request_hash, m)?)?;
    m.add_class::<PyConfig>()?;
    m.add_class::<PyRules>()?;
    m.add_class::<PyCallIdentity>()?;
    m.add_class::<PyPrepared>()?;
    m.add_class::<PyLane>()?;
    m.add_class::<PyEnding>()?;
    m.add_class::<PyClientDefaults>()?;
    add_statuses(m)?;
    add_defaults(m)?;
    for (name, text) in statements()? {
        m.add(name, text)?;
    }
    m.add("OUTBOX_CHANNEL", oncebox_sql::OUTBOX_CHANNEL)?;
    m.add("DONE_CHANNEL", oncebox_sql::DONE_CHANNEL)?;
    m.add("REDACTION_KEYS_ENV", RedactionKeys::ENV)?;
    m.add("MAX_SAFE_INTEGER", hash::MAX_SAFE_INTEGER)?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
