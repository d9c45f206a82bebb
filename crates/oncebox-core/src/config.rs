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

use serde::Deserialize;

use crate::key::validate_token;
use crate::redact::RedactRule;

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

/// The transport of a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DestinationKind {
    /// An HTTP endpoint.
    Http,
}

/// A receiver of intents.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Destination {
    /// The transport.
    pub kind: DestinationKind,
    /// The endpoint, for HTTP destinations.
    pub url: Option<String>,
    /// How the receiver treats repeated keys.
    pub idempotency: IdempotencyMode,
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
            match (dest.kind, &dest.url) {
                (DestinationKind::Http, None) => {
                    return err(
                        format!("destinations.{name}.url"),
                        "required for kind = \"http\"".into(),
                    );
                }
                (DestinationKind::Http, Some(url))
                    if !(url.starts_with("http://") || url.starts_with("https://")) =>
                {
                    return err(
                        format!("destinations.{name}.url"),
                        format!("{url:?} must start with http:// or https://"),
                    );
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The action named `name`, if configured.
    pub fn action(&self, name: &str) -> Option<&Action> {
        self.actions.get(name)
    }
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
