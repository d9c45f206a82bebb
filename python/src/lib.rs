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
use oncebox_core::{InvalidIntent, NewIntent, hash, key};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use serde_json::Value;

/// The exceptions this module raises, and their root: defined here, once, when the module is
/// imported (Python classes, since `InvalidIntent` and `ConfigError` are `ValueError`s as well
/// as `OnceboxError`s). `oncebox._errors` re-exports them beside the rest of the hierarchy.
const ERRORS: &std::ffi::CStr = cr#"
class OnceboxError(Exception):
    """The base of every error oncebox raises."""


class InvalidIntent(OnceboxError, ValueError):
    """A field of an intent is not acceptable; nothing was written. Never retry as is."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        """The field at fault: ``idempotency_key``, ``action``, ``arguments/amount``..."""
        self.reason = reason
        """What is wrong and what to do instead."""


class ConfigError(OnceboxError, ValueError):
    """The TOML configuration (or the redaction keys) cannot be used."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        """The dotted path of the field (``destinations.billing.timeout``), or line and column."""
        self.reason = reason
        """What is wrong."""
"#;

/// The classes of [`ERRORS`] this module raises, kept when it is imported.
static INVALID_INTENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static CONFIG_ERROR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// An exception of `class` (one of [`ERRORS`]) about `field`, to raise.
fn raise(
    py: Python<'_>,
    class: &PyOnceLock<Py<PyAny>>,
    (field, reason): (impl Into<String>, String),
) -> PyErr {
    let field = field.into();
    let Some(class) = class.get(py) else {
        return PyValueError::new_err(format!("{field}: {reason}"));
    };
    match class.bind(py).call1((field, reason)) {
        Ok(exception) => PyErr::from_value(exception),
        Err(e) => e,
    }
}

fn invalid(py: Python<'_>, e: InvalidIntent) -> PyErr {
    raise(py, &INVALID_INTENT, (e.field, e.reason))
}

/// Reads `text` as the JSON value of `field` (`arguments`, say): a number beyond ±2^53 is
/// named by its pointer inside the field, as the HTTP API names it.
fn parse_json(py: Python<'_>, field: &str, text: &str) -> PyResult<Value> {
    json::parse(text.as_bytes()).map_err(|e| {
        let at = match &e {
            JsonError::UnsafeNumber { pointer } => format!("{field}{pointer}"),
            JsonError::Syntax(_) => field.to_owned(),
        };
        invalid(py, InvalidIntent::new(at, e.to_string()))
    })
}

/// Refuses an unusable idempotency key, naming the field `idempotency_key`.
#[pyfunction]
fn validate_key(py: Python<'_>, key: &str) -> PyResult<()> {
    key::validate_key(key)
        .map_err(|e| invalid(py, InvalidIntent::new("idempotency_key", e.to_string())))
}

/// `business_key(tenant, action, business_id, version)`: hex SHA-256 of
/// `tenant|action|business_id|version`.
#[pyfunction]
fn business_key(tenant: &str, action: &str, business_id: &str, version: &str) -> String {
    key::business_key(tenant, action, business_id, version)
}

/// `delivery_key(tenant, key)`: what every destination sees as the identity of `tenant`'s
/// intent `key` (unique across tenants).
#[pyfunction]
fn delivery_key(tenant: &str, key: &str) -> String {
    oncebox_core::delivery_key(tenant, key)
}

/// `principal(name)`: the principal a writer names itself (`user:NAME`), as the journal records
/// it; a name that cannot be one raises `InvalidIntent` naming `principal`.
#[pyfunction]
fn principal(py: Python<'_>, name: &str) -> PyResult<String> {
    oncebox_core::Principal::named("principal", name)
        .map(|p| p.to_string())
        .map_err(|e| invalid(py, InvalidIntent::new(e.field, e.reason)))
}

/// `step_key(session, step, tool, arguments_json)`: hex SHA-256 of `session:step:tool:` and
/// the JCS form of the arguments.
#[pyfunction]
fn step_key(
    py: Python<'_>,
    session: &str,
    step: u64,
    tool: &str,
    arguments: &str,
) -> PyResult<String> {
    let value = parse_json(py, "arguments", arguments)?;
    Ok(key::step_key(session, step, tool, &value))
}

/// RFC 8785 canonical JSON of the JSON text given.
#[pyfunction]
fn canonical_json(py: Python<'_>, document: &str) -> PyResult<String> {
    Ok(hash::canonical_json(&parse_json(py, "document", document)?))
}

/// The request hash of `action` with `arguments` (JSON text) as given — no redaction; for the
/// hash an intent is recorded with, see `Intake.recorded`.
#[pyfunction]
fn request_hash(py: Python<'_>, action: &str, arguments: &str) -> PyResult<String> {
    Ok(hash::request_hash(
        action,
        &parse_json(py, "arguments", arguments)?,
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
    #[pyo3(signature = (tool, arguments, pointers=None, window=86400.0))]
    fn new(
        py: Python<'_>,
        tool: &str,
        arguments: &str,
        pointers: Option<Vec<String>>,
        window: f64,
    ) -> PyResult<PyCallIdentity> {
        if !(window.is_finite() && window >= 1.0) {
            return Err(raise(
                py,
                &INVALID_INTENT,
                ("dedupe_window", "must be at least a second".into()),
            ));
        }
        let arguments = parse_json(py, "arguments", arguments)?;
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
        .map_err(|e| invalid(py, e))
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
    fn from_toml(py: Python<'_>, text: &str) -> PyResult<PyConfig> {
        CoreConfig::from_toml(text)
            .map(|inner| PyConfig { inner })
            .map_err(|e| raise(py, &CONFIG_ERROR, (e.field, e.reason)))
    }

    /// The configured action names, in order.
    #[getter]
    fn actions(&self) -> Vec<String> {
        self.inner.actions.keys().cloned().collect()
    }
}

/// The rules of an intake: configured actions, their redaction, the keys that hash.
#[pyclass(frozen, name = "Rules", module = "oncebox._native")]
struct PyRules {
    inner: Rules,
}

/// What an intent is recorded as: `(payload_json, redacted, request_hash)`.
type RecordedTuple = (String, bool, String);

/// A prepared intent: what [`RecordedTuple`] holds, then what its action's approval policy asks
/// of it (approvals needed and the window in seconds; `None` for neither).
type PreparedTuple = (String, bool, String, Option<u32>, Option<f64>);

fn recorded_tuple(r: oncebox_core::intake::Recorded) -> RecordedTuple {
    (r.payload.to_string(), r.redacted, r.request_hash)
}

#[pymethods]
impl PyRules {
    /// Rules for `config`, hashing with `redaction_keys` (the `ONCEBOX_REDACTION_KEYS` format,
    /// `id:secret[,older…]`); `None` reads that variable, as the Rust intake does.
    #[new]
    #[pyo3(signature = (config, redaction_keys=None))]
    fn new(py: Python<'_>, config: &PyConfig, redaction_keys: Option<&str>) -> PyResult<PyRules> {
        let keys = match redaction_keys {
            Some(text) => RedactionKeys::parse(text).map(Some),
            None => RedactionKeys::from_env(),
        }
        .map_err(|e| raise(py, &CONFIG_ERROR, ("redaction_keys", e)))?;
        Rules::new(&config.inner, keys)
            .map(|inner| PyRules { inner })
            .map_err(|e| {
                raise(
                    py,
                    &CONFIG_ERROR,
                    (format!("actions.{}.redact", e.action), e.to_string()),
                )
            })
    }

    /// The configured action names, in order.
    #[getter]
    fn actions(&self) -> Vec<String> {
        self.inner.actions().map(str::to_owned).collect()
    }

    /// Checks every field of a new intent (the deadline, a Python `datetime`, is checked by the
    /// caller) and returns what it is recorded as, and what its action's approval policy asks
    /// of it.
    #[pyo3(signature = (tenant, key, action, arguments, business_ref, run_id, step, ordering_key=None))]
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
    ) -> PyResult<PreparedTuple> {
        let intent = NewIntent {
            tenant_id: tenant.to_owned(),
            idempotency_key: key.to_owned(),
            action: action.to_owned(),
            arguments: parse_json(py, "arguments", arguments)?,
            business_ref,
            run_id,
            step,
            deadline: None::<SystemTime>,
            ordering_key,
        };
        // Other threads' Python runs meanwhile (an orchestrator submits from many threads).
        let rules = &self.inner;
        py.detach(|| {
            let (payload, redacted, hash) = rules.prepare(&intent).map(recorded_tuple)?;
            let approval = rules.approval(&intent.action, &intent.arguments)?;
            Ok((
                payload,
                redacted,
                hash,
                approval.map(|a| a.approvals.get()),
                approval.map(|a| a.window.as_secs_f64()),
            ))
        })
        .map_err(|e| invalid(py, e))
    }

    /// The lane `action`'s intents with an ordering key queue in: its destination's name, and
    /// whether that destination's lanes skip a failed head.
    fn lane(&self, py: Python<'_>, action: &str) -> PyResult<(String, bool)> {
        self.inner
            .lane(action)
            .map(|l| (l.destination.clone(), l.skip_failed))
            .map_err(|e| invalid(py, e))
    }

    /// The identity of a call of `action` with `arguments` (JSON text) that names no key and no
    /// run: its `[actions.X.tool]` key and dedupe window, or all the arguments and a day.
    fn call_identity(
        &self,
        py: Python<'_>,
        action: &str,
        arguments: &str,
    ) -> PyResult<PyCallIdentity> {
        let arguments = parse_json(py, "arguments", arguments)?;
        self.inner
            .call_identity(action, &arguments)
            .map(|inner| PyCallIdentity { inner })
            .map_err(|e| invalid(py, e))
    }

    /// What `action` with `arguments` is recorded as (as `oncebox hash --config` prints it).
    fn recorded(&self, py: Python<'_>, action: &str, arguments: &str) -> PyResult<RecordedTuple> {
        let arguments = parse_json(py, "arguments", arguments)?;
        self.inner
            .recorded(action, &arguments)
            .map(recorded_tuple)
            .map_err(|e| invalid(py, e))
    }

    /// Whether a submit whose key already names a recorded intent is a replay of it.
    fn is_replay(
        &self,
        py: Python<'_>,
        action: &str,
        arguments: &str,
        submitted_hash: &str,
        recorded_hash: &str,
        recorded_payload: &str,
    ) -> PyResult<bool> {
        let arguments = parse_json(py, "arguments", arguments)?;
        let payload = json::parse(recorded_payload.as_bytes())
            .map_err(|e| PyValueError::new_err(format!("the recorded payload: {e}")))?;
        Ok(self
            .inner
            .is_replay(action, &arguments, submitted_hash, recorded_hash, &payload))
    }
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

/// The module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let errors = PyModule::from_code(py, ERRORS, c"oncebox/_native.rs", c"oncebox._native")?;
    for name in ["OnceboxError", "InvalidIntent", "ConfigError"] {
        m.add(name, errors.getattr(name)?)?;
    }
    for (lock, name) in [
        (&INVALID_INTENT, "InvalidIntent"),
        (&CONFIG_ERROR, "ConfigError"),
    ] {
        let class = errors.getattr(name)?.unbind();
        // Set once per process: the module is imported once.
        let _ = lock.set(py, class);
    }
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
