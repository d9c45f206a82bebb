//! An action's JSON Schema for its arguments (`[actions.X.arguments_schema]`): compiled when
//! the configuration is read, enforced on every intake path (HTTP API, CLI, library, Python)
//! by [`crate::intake::Rules::prepare`], and shown to MCP clients as the tool's `inputSchema`.
//!
//! Only the schema itself is read: references to other documents (`$ref` to a URL or a file)
//! are not fetched, so a schema that needs one is refused when the configuration is loaded.
//! Refusals name the field (`arguments/amount`) and mask the value, which may be secret.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::invalid::InvalidIntent;

/// A compiled JSON Schema for an action's arguments.
#[derive(Clone)]
pub struct ArgumentsSchema {
    source: Arc<Value>,
    validator: Arc<jsonschema::Validator>,
}

impl ArgumentsSchema {
    /// Compiles `source` (draft 2020-12 unless its `$schema` names another draft).
    ///
    /// # Errors
    /// What is wrong with the schema: not an object, not a valid schema, or a reference that
    /// would need fetching.
    pub fn new(source: Value) -> Result<ArgumentsSchema, String> {
        if !source.is_object() {
            return Err("must be a JSON Schema object, such as { type = \"object\" }".into());
        }
        let validator = jsonschema::validator_for(&source).map_err(|e| e.to_string())?;
        Ok(ArgumentsSchema {
            source: Arc::new(source),
            validator: Arc::new(validator),
        })
    }

    /// The schema as written (the MCP tool's `inputSchema`).
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Checks `arguments` against the schema.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming the first field at fault (`arguments/amount`; `arguments` for
    /// the object itself, such as a missing required property), its value masked.
    pub fn check(&self, arguments: &Value) -> Result<(), InvalidIntent> {
        match self.validator.validate(arguments) {
            Ok(()) => Ok(()),
            Err(e) => Err(InvalidIntent::new(
                format!("arguments{}", e.instance_path().as_str()),
                format!("does not match the action's schema: {}", e.masked()),
            )),
        }
    }
}

impl PartialEq for ArgumentsSchema {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Debug for ArgumentsSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ArgumentsSchema")
            .field(&self.source)
            .finish()
    }
}

impl<'de> Deserialize<'de> for ArgumentsSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let source = Value::deserialize(deserializer)?;
        ArgumentsSchema::new(source).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn invoice() -> ArgumentsSchema {
        ArgumentsSchema::new(json!({
            "type": "object",
            "required": ["order_id", "amount"],
            "properties": {
                "order_id": {"type": "string"},
                "amount": {"type": "string", "pattern": "^-?[0-9]+\\.[0-9]{2}$"},
                "lines": {"type": "array", "items": {"type": "integer"}}
            },
            "additionalProperties": false
        }))
        .expect("a valid schema")
    }

    #[test]
    fn a_match_passes_and_a_mismatch_names_the_field_without_its_value() {
        let s = invoice();
        assert_eq!(s.check(&json!({"order_id": "o", "amount": "1.00"})), Ok(()));
        let e = s
            .check(&json!({"order_id": "o", "amount": "4111111111111111"}))
            .expect_err("pattern");
        assert_eq!(e.field, "arguments/amount");
        assert!(
            !e.reason.contains("4111"),
            "the value is masked: {}",
            e.reason
        );
        let e = s
            .check(&json!({"order_id": "o", "amount": "1.00", "lines": [1, "x"]}))
            .expect_err("item type");
        assert_eq!(e.field, "arguments/lines/1");
        let e = s.check(&json!({"order_id": "o"})).expect_err("required");
        assert_eq!(e.field, "arguments");
        assert!(e.reason.contains("amount"), "{}", e.reason);
    }

    #[test]
    fn a_bad_schema_in_the_config_is_named_by_its_dotted_path() {
        let text = r#"
[actions.pay]
destination = "d"
arguments_schema = { type = 12 }

[destinations.d]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "key"
"#;
        let e = crate::config::Config::from_toml(text).expect_err("bad schema");
        assert_eq!(e.field, "actions.pay.arguments_schema", "{e}");
    }

    #[test]
    fn bad_schemas_are_refused_when_read() {
        assert!(ArgumentsSchema::new(json!("string")).is_err());
        assert!(ArgumentsSchema::new(json!({"type": 12})).is_err());
        assert!(
            ArgumentsSchema::new(json!({"$ref": "https://example.invalid/s.json"})).is_err(),
            "nothing is fetched"
        );
    }
}
