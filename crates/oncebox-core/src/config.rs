//! The operator's configuration file (TOML): which actions exist, where each one goes, and what
//! is redacted. Parsing is strict: an unknown field or a bad value stops start-up with a message
//! that names the field.
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

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use crate::key::validate_token;
use crate::redact::RedactRule;
use crate::retry::RetryPolicy;

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
}

/// One action an agent may request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// The destination (a key of `[destinations]`) that carries out this action.
    pub destination: String,
    /// Redaction rules applied to the arguments before they are stored or logged.
    #[serde(default)]
    pub redact: Vec<RedactRule>,
}

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

/// The transport of a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DestinationKind {
    /// An HTTP endpoint.
    Http,
    /// A RabbitMQ exchange (AMQP 0-9-1), with publisher confirms.
    Amqp,
}

/// The HTTP method used to deliver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    /// POST (the default).
    #[default]
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
}

impl HttpMethod {
    /// The method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Post => "POST",
            HttpMethod::Put => "PUT",
            HttpMethod::Patch => "PATCH",
        }
    }
}

/// A header value that may read secrets from the environment (`${NAME}`), resolved once at
/// start-up by [`Config::resolve_env`]. Its `Debug` form never shows the value.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct HeaderValue(String);

impl HeaderValue {
    /// The value, with environment references resolved once [`Config::resolve_env`] ran.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeaderValue(<redacted>)")
    }
}

/// Retry policy settings of a destination; see [`crate::retry::RetryPolicy`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySettings {
    /// Attempts in all, the first included (default 8).
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// Backoff cap before the first retry, doubled after each (default "500ms").
    #[serde(default = "default_initial_delay", deserialize_with = "de_duration")]
    pub initial_delay: Duration,
    /// Largest backoff (default "60s"); a receiver's Retry-After may ask for longer.
    #[serde(default = "default_max_delay", deserialize_with = "de_duration")]
    pub max_delay: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: default_max_attempts(),
            initial_delay: default_initial_delay(),
            max_delay: default_max_delay(),
        }
    }
}

impl RetrySettings {
    /// The policy these settings describe.
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts,
            initial_delay: self.initial_delay,
            max_delay: self.max_delay,
        }
    }
}

/// How to look an effect up at the destination by key (reconciliation).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupSettings {
    /// A GET URL template with `{key}` and/or `{external_reference}`.
    pub url: String,
    /// JSON pointer to the list of objects found, in the lookup's answer ("" for the root).
    #[serde(default)]
    pub results_pointer: String,
    /// Fields (JSON pointers into each found object and into the intent's arguments) that must
    /// agree for a match to count.
    #[serde(default)]
    pub fields: Vec<String>,
    /// JSON pointer to the external reference inside a found object.
    pub reference_pointer: Option<String>,
    /// Timeout of one lookup request (default "5s").
    #[serde(default = "default_lookup_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
}

/// A receiver of intents.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Destination {
    /// The transport.
    pub kind: DestinationKind,
    /// The endpoint, for HTTP destinations.
    pub url: Option<String>,
    /// The HTTP method (default POST).
    #[serde(default)]
    pub method: HttpMethod,
    /// How the receiver treats repeated keys.
    pub idempotency: IdempotencyMode,
    /// Extra request headers; values may read the environment with `${NAME}`. Never logged.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Timeout of one request, from sending to the whole answer (default "10s"). Always shorter
    /// than the worker's lease.
    #[serde(default = "default_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Retry policy for attempts that definitely did not execute.
    #[serde(default)]
    pub retry: RetrySettings,
    /// How long after dispatch a lookup that finds nothing may still be behind (default "60s");
    /// only then is the intent re-issued.
    #[serde(
        default = "default_consistency_window",
        deserialize_with = "de_duration"
    )]
    pub consistency_window: Duration,
    /// JSON pointer to the external reference in a successful answer, such as "/id".
    pub reference_pointer: Option<String>,
    /// For `text/event-stream` answers: the event name that marks completion. A stream that
    /// ends without it is an unknown outcome.
    pub completion_event: Option<String>,
    /// Statuses to treat as "definitely not executed, retry" instead of the defaults.
    pub retry_statuses: Option<Vec<u16>>,
    /// Statuses to treat as "permanent failure" instead of the defaults.
    pub permanent_statuses: Option<Vec<u16>>,
    /// Deliveries in flight to this destination at once, per worker (default: no extra limit).
    pub max_in_flight: Option<usize>,
    /// Reconciliation lookup; required for `idempotency = "lookup"`.
    pub lookup: Option<LookupSettings>,
    /// AMQP: the broker URL (may read the environment with `${NAME}`); default `AMQP_URL`.
    pub amqp_url: Option<HeaderValue>,
    /// AMQP: the exchange to publish to ("" is the default exchange).
    pub exchange: Option<String>,
    /// AMQP: the routing key.
    pub routing_key: Option<String>,
    /// AMQP: publish as mandatory, so an unroutable message comes back and the intent fails
    /// (default true).
    #[serde(default = "default_true")]
    pub mandatory: bool,
    /// AMQP: unconfirmed messages allowed in flight on the channel (default 256).
    #[serde(default = "default_max_unconfirmed")]
    pub max_unconfirmed: usize,
}

fn default_true() -> bool {
    true
}
fn default_max_unconfirmed() -> usize {
    256
}

fn default_max_attempts() -> u32 {
    8
}
fn default_initial_delay() -> Duration {
    Duration::from_millis(500)
}
fn default_max_delay() -> Duration {
    Duration::from_secs(60)
}
fn default_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_lookup_timeout() -> Duration {
    Duration::from_secs(5)
}
fn default_consistency_window() -> Duration {
    Duration::from_secs(60)
}

/// Parses "250ms", "10s", "5m", "1h", "30d" (a whole number and a unit).
///
/// # Errors
/// A message saying what is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| {
        format!("{text:?} is not a duration such as \"250ms\", \"10s\", \"5m\" or \"1h\"")
    })?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        "d" => Duration::from_secs(n.saturating_mul(86_400)),
        _ => {
            return Err(format!(
                "{text:?} has no unit; write it like \"250ms\", \"10s\", \"5m\" or \"1h\""
            ));
        }
    };
    Ok(d)
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

fn valid_pointer(p: &str) -> bool {
    p.is_empty() || (p.starts_with('/') && !p.contains("~2"))
}

/// A configuration that cannot be used, naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ConfigError {
    /// The dotted path of the field, such as `actions.create_invoice.destination`; for syntax
    /// errors, what the TOML parser names.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

impl Config {
    /// Parses and validates a TOML document.
    ///
    /// # Errors
    /// [`ConfigError`] for syntax errors, unknown fields, bad values and dangling references.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError {
            field: e.span().map_or_else(
                || "config".into(),
                |s| {
                    let before = &text[..s.start.min(text.len())];
                    let line = before.matches('\n').count() + 1;
                    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                    format!("line {line}, column {column}")
                },
            ),
            reason: e.message().to_owned(),
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks references and values that the TOML types cannot express.
    ///
    /// # Errors
    /// [`ConfigError`] naming the first field at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: String, reason: String| Err(ConfigError { field, reason });
        for (name, action) in &self.actions {
            if let Err(e) = validate_token(name, 255) {
                return err(format!("actions.{name}"), format!("action name {e}"));
            }
            if !self.destinations.contains_key(&action.destination) {
                return err(
                    format!("actions.{name}.destination"),
                    format!(
                        "no destination named {:?} in [destinations]",
                        action.destination
                    ),
                );
            }
            for (i, rule) in action.redact.iter().enumerate() {
                if let Err(e) = rule.validate() {
                    return err(format!("actions.{name}.redact[{i}].pointer"), e.to_string());
                }
            }
        }
        for (name, dest) in &self.destinations {
            let f = |field: &str| format!("destinations.{name}.{field}");
            if dest.kind == DestinationKind::Amqp {
                if dest.routing_key.is_none() {
                    return err(f("routing_key"), "required for kind = \"amqp\"".into());
                }
                if dest.idempotency != IdempotencyMode::Key {
                    return err(
                        f("idempotency"),
                        "AMQP destinations honour keys by contract (consumers deduplicate on message_id): use \"key\"".into(),
                    );
                }
                if dest.max_unconfirmed == 0 {
                    return err(f("max_unconfirmed"), "must be at least 1".into());
                }
                if dest.url.is_some() {
                    return err(
                        f("url"),
                        "AMQP destinations take amqp_url (default AMQP_URL), not url".into(),
                    );
                }
            }
            match (dest.kind, &dest.url) {
                (DestinationKind::Http, None) => {
                    return err(f("url"), "required for kind = \"http\"".into());
                }
                (DestinationKind::Http, Some(url))
                    if !(url.starts_with("http://") || url.starts_with("https://")) =>
                {
                    return err(
                        f("url"),
                        format!("{url:?} must start with http:// or https://"),
                    );
                }
                _ => {}
            }
            if dest.timeout.is_zero() {
                return err(f("timeout"), "must be more than zero".into());
            }
            if let Err(e) = dest.retry.policy().validate() {
                return err(f("retry"), e.to_string());
            }
            for (header, value) in &dest.headers {
                if header.is_empty()
                    || !header
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                {
                    return err(
                        f(&format!("headers.{header}")),
                        "not a valid header name".into(),
                    );
                }
                if let Err(e) = env_references(value.expose()) {
                    return err(f(&format!("headers.{header}")), e);
                }
            }
            for (field, pointer) in [("reference_pointer", &dest.reference_pointer)] {
                if pointer.as_deref().is_some_and(|p| !valid_pointer(p)) {
                    return err(f(field), "must be a JSON pointer such as \"/id\"".into());
                }
            }
            for (field, list) in [
                ("retry_statuses", &dest.retry_statuses),
                ("permanent_statuses", &dest.permanent_statuses),
            ] {
                if let Some(bad) = list.iter().flatten().find(|s| !(100..=599).contains(*s)) {
                    return err(f(field), format!("{bad} is not an HTTP status"));
                }
            }
            if dest.max_in_flight == Some(0) {
                return err(f("max_in_flight"), "must be at least 1".into());
            }
            match (&dest.lookup, dest.idempotency) {
                (None, IdempotencyMode::Lookup) => {
                    return err(f("lookup"), "required for idempotency = \"lookup\"".into());
                }
                (Some(l), _) => {
                    if !(l.url.starts_with("http://") || l.url.starts_with("https://")) {
                        return err(
                            f("lookup.url"),
                            format!("{:?} must start with http:// or https://", l.url),
                        );
                    }
                    if !(l.url.contains("{key}") || l.url.contains("{external_reference}")) {
                        return err(
                            f("lookup.url"),
                            "must contain {key} or {external_reference}".into(),
                        );
                    }
                    if !valid_pointer(&l.results_pointer) {
                        return err(f("lookup.results_pointer"), "must be a JSON pointer".into());
                    }
                    if let Some(p) = l.fields.iter().find(|p| !valid_pointer(p) || p.is_empty()) {
                        return err(
                            f("lookup.fields"),
                            format!("{p:?} must be a JSON pointer such as \"/amount\""),
                        );
                    }
                    if l.timeout.is_zero() {
                        return err(f("lookup.timeout"), "must be more than zero".into());
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Replaces every `${NAME}` in header values by the environment variable `NAME`, read
    /// through `lookup` (the process environment at start-up, a map in tests).
    ///
    /// # Errors
    /// [`ConfigError`] naming the header whose variable is not set.
    pub fn resolve_env(
        &mut self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        for (name, dest) in &mut self.destinations {
            if let Some(url) = &mut dest.amqp_url {
                resolve_value(format!("destinations.{name}.amqp_url"), url, &lookup)?;
            }
            for (header, value) in &mut dest.headers {
                resolve_value(
                    format!("destinations.{name}.headers.{header}"),
                    value,
                    &lookup,
                )?;
            }
        }
        Ok(())
    }

    /// The action named `name`, if configured.
    pub fn action(&self, name: &str) -> Option<&Action> {
        self.actions.get(name)
    }
}

/// Resolves `${NAME}` in `value`; errors name `field`.
fn resolve_value(
    field: String,
    value: &mut HeaderValue,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let mut out = String::new();
    let mut rest = value.0.as_str();
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .map(|e| start + e)
            .unwrap_or(rest.len());
        let var = &rest[start + 2..end];
        let resolved = lookup(var).ok_or_else(|| ConfigError {
            field: field.clone(),
            reason: format!("environment variable {var} is not set"),
        })?;
        out.push_str(&resolved);
        rest = &rest[(end + 1).min(rest.len())..];
    }
    out.push_str(rest);
    value.0 = out;
    Ok(())
}

/// Checks the `${NAME}` references of a header template.
fn env_references(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let Some(end) = rest[start..].find('}') else {
            return Err("\"${\" without its closing \"}\"".into());
        };
        let var = &rest[start + 2..start + end];
        if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("${{{var}}} is not an environment variable name"));
        }
        rest = &rest[start + end + 1..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redact::RedactMode;

    const GOOD: &str = r#"
        [actions.create_invoice]
        destination = "billing"
        redact = [{ pointer = "/card/number", mode = "hash" }]

        [destinations.billing]
        kind = "http"
        url = "http://127.0.0.1:9/invoices"
        idempotency = "key"
    "#;

    #[test]
    fn parses_a_complete_file() {
        let c = Config::from_toml(GOOD).expect("valid");
        let a = c.action("create_invoice").expect("action");
        assert_eq!(a.destination, "billing");
        assert_eq!(a.redact[0].mode, RedactMode::Hash);
        assert_eq!(c.destinations["billing"].idempotency, IdempotencyMode::Key);
        assert!(c.action("refund").is_none());
    }

    #[test]
    fn destination_defaults_and_durations() {
        let c = Config::from_toml(GOOD).expect("valid");
        let d = &c.destinations["billing"];
        assert_eq!(d.method, HttpMethod::Post);
        assert_eq!(d.timeout, Duration::from_secs(10));
        assert_eq!(d.retry.policy(), RetryPolicy::default());
        assert_eq!(d.consistency_window, Duration::from_secs(60));
        assert!(d.idempotency.honours_keys());
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("ten s").is_err());
        assert!(parse_duration("1.5s").is_err());
    }

    #[test]
    fn header_secrets_come_from_the_environment_and_never_print() {
        let text = GOOD.replace(
            "idempotency = \"key\"",
            "idempotency = \"key\"\nheaders = { Authorization = \"Bearer ${BILLING_TOKEN}\", X-Team = \"ops\" }",
        );
        let mut c = Config::from_toml(&text).expect("valid");
        let e = c.resolve_env(|_| None).expect_err("unset variable");
        assert_eq!(e.field, "destinations.billing.headers.Authorization");
        assert!(e.reason.contains("BILLING_TOKEN"));
        c.resolve_env(|v| (v == "BILLING_TOKEN").then(|| "s3cret".to_owned()))
            .expect("set");
        let h = &c.destinations["billing"].headers;
        assert_eq!(h["Authorization"].expose(), "Bearer s3cret");
        assert_eq!(h["X-Team"].expose(), "ops");
        assert!(
            !format!("{c:?}").contains("s3cret"),
            "secrets must not reach Debug output"
        );
        let bad = GOOD.replace(
            "idempotency = \"key\"",
            "idempotency = \"key\"\nheaders = { A = \"${not-a-var}\" }",
        );
        assert_eq!(
            Config::from_toml(&bad).expect_err("bad ref").field,
            "destinations.billing.headers.A"
        );
    }

    #[test]
    fn destination_values_are_checked() {
        let with = |extra: &str| {
            GOOD.replace(
                "idempotency = \"key\"",
                &format!("idempotency = \"key\"\n{extra}"),
            )
        };
        let field = |extra: &str| Config::from_toml(&with(extra)).expect_err(extra).field;
        assert_eq!(field("timeout = \"0s\""), "destinations.billing.timeout");
        assert!(field("timeout = \"soon\"").starts_with("line "));
        assert_eq!(
            field("retry = { max_attempts = 0 }"),
            "destinations.billing.retry"
        );
        assert_eq!(
            field("retry_statuses = [700]"),
            "destinations.billing.retry_statuses"
        );
        assert_eq!(
            field("reference_pointer = \"id\""),
            "destinations.billing.reference_pointer"
        );
        assert_eq!(
            field("max_in_flight = 0"),
            "destinations.billing.max_in_flight"
        );
        assert_eq!(
            field("lookup = { url = \"http://x/find\" }"),
            "destinations.billing.lookup.url"
        );
        let lookup_mode = GOOD.replace("\"key\"", "\"lookup\"");
        assert_eq!(
            Config::from_toml(&lookup_mode).expect_err("lookup").field,
            "destinations.billing.lookup"
        );
        let ok = with(
            "lookup = { url = \"http://x/find?key={key}\", results_pointer = \"/data\", fields = [\"/amount\"] }",
        );
        let c = Config::from_toml(&ok).expect("lookup config");
        assert_eq!(
            c.destinations["billing"]
                .lookup
                .as_ref()
                .expect("lookup")
                .timeout,
            Duration::from_secs(5)
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e =
            Config::from_toml(&GOOD.replace("destination = \"billing\"", "destination = \"nope\""))
                .expect_err("dangling");
        assert_eq!(e.field, "actions.create_invoice.destination");

        let e = Config::from_toml(&GOOD.replace("/card/number", "card")).expect_err("pointer");
        assert_eq!(e.field, "actions.create_invoice.redact[0].pointer");

        let e = Config::from_toml(&GOOD.replace("http://127", "ftp://127")).expect_err("url");
        assert_eq!(e.field, "destinations.billing.url");

        let e = Config::from_toml(
            &GOOD.replace("idempotency = \"key\"", "idempotency = \"key\"\ncolour = 1"),
        )
        .expect_err("unknown field");
        assert!(e.reason.contains("colour"), "{e}");

        let e =
            Config::from_toml(&GOOD.replace("\"key\"", "\"sometimes\"")).expect_err("bad value");
        assert!(
            e.reason.contains("sometimes") && e.reason.contains("key"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod example {
    /// The example shipped in deploy/ must stay valid.
    #[test]
    fn deploy_example_parses() {
        let text = include_str!("../../../deploy/oncebox.example.toml");
        let c = super::Config::from_toml(text).expect("deploy/oncebox.example.toml is valid");
        assert_eq!(c.actions.len(), 2);
        assert_eq!(c.destinations.len(), 2);
    }
}
