//! The shape of a new intent and the checks it must pass before anything is written.

use std::time::SystemTime;

use serde_json::Value;

use crate::hash::{canonical_json, find_unsafe_number};
use crate::key::{validate_key, validate_token};

pub use crate::invalid::InvalidIntent;

/// Longest tenant id, in bytes.
pub const MAX_TENANT_LEN: usize = 128;
/// Longest `business_ref`, `run_id` or `step`, in bytes.
pub const MAX_LABEL_LEN: usize = 255;
/// Largest accepted `arguments`, measured as canonical JSON, in bytes.
pub const MAX_ARGUMENTS_BYTES: usize = 256 * 1024;

/// What an orchestrator asks oncebox to do once.
#[derive(Debug, Clone, PartialEq)]
pub struct NewIntent {
    /// The owner of the intent; keys are unique per tenant.
    pub tenant_id: String,
    /// The stable idempotency key (1–255 printable ASCII, no spaces).
    pub idempotency_key: String,
    /// An operator-configured action name, such as `create_invoice`.
    pub action: String,
    /// The action's arguments: a JSON object, with no number beyond ±2^53 (checked by
    /// [`NewIntent::validate`]). Read JSON text with [`crate::json::parse`], which says where a
    /// literal too large even for a double is.
    pub arguments: Value,
    /// The caller's own reference (order number), for search and reconciliation.
    pub business_ref: Option<String>,
    /// The agent run this intent belongs to.
    pub run_id: Option<String>,
    /// The step within the run.
    pub step: Option<String>,
    /// No attempt starts after this time; past it the intent ends `expired`.
    pub deadline: Option<SystemTime>,
    /// Intents of one tenant and destination with the same ordering key are delivered one at a
    /// time, in submit order (1–255 bytes without control characters).
    pub ordering_key: Option<String>,
}

/// The three names that identify an intent, by name: who owns it, its key and what it does.
///
/// They are all strings, so [`NewIntent::new`] takes them by field name rather than by position,
/// where a tenant and a key could swap unnoticed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntentNames<'a> {
    /// The owner of the intent; keys are unique per tenant.
    pub tenant_id: &'a str,
    /// The stable idempotency key.
    pub idempotency_key: &'a str,
    /// The configured action, such as `create_invoice`.
    pub action: &'a str,
}

impl NewIntent {
    /// An intent with no optional fields set.
    ///
    /// ```
    /// use oncebox_core::{IntentNames, NewIntent};
    ///
    /// let intent = NewIntent::new(
    ///     IntentNames { tenant_id: "acme", idempotency_key: "order-42", action: "create_invoice" },
    ///     serde_json::json!({ "amount_cents": 1200 }),
    /// );
    /// assert_eq!(intent.idempotency_key, "order-42");
    /// ```
    pub fn new(names: IntentNames<'_>, arguments: Value) -> Self {
        NewIntent {
            tenant_id: names.tenant_id.to_owned(),
            idempotency_key: names.idempotency_key.to_owned(),
            action: names.action.to_owned(),
            arguments,
            business_ref: None,
            run_id: None,
            step: None,
            deadline: None,
            ordering_key: None,
        }
    }

    /// Checks every field; the first problem found is returned.
    ///
    /// A deadline in the past is accepted on purpose: a retried submit must find its original
    /// intent, and a new one simply ends `expired` without an attempt.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming the field.
    pub fn validate(&self) -> Result<(), InvalidIntent> {
        validate_token(&self.tenant_id, MAX_TENANT_LEN)
            .map_err(|e| InvalidIntent::new("tenant_id", e.to_string()))?;
        validate_key(&self.idempotency_key)
            .map_err(|e| InvalidIntent::new("idempotency_key", e.to_string()))?;
        validate_token(&self.action, MAX_LABEL_LEN)
            .map_err(|e| InvalidIntent::new("action", e.to_string()))?;
        if !self.arguments.is_object() {
            return Err(InvalidIntent::new(
                "arguments",
                format!("must be a JSON object, not {}", kind(&self.arguments)),
            ));
        }
        if let Some(pointer) = find_unsafe_number(&self.arguments) {
            return Err(InvalidIntent::new(
                format!("arguments{pointer}"),
                crate::json::UNSAFE_NUMBER,
            ));
        }
        if let Some(pointer) = crate::hash::find_nul(&self.arguments) {
            return Err(InvalidIntent::new(
                format!("arguments{pointer}"),
                "holds U+0000, which cannot be stored; remove it or encode the value",
            ));
        }
        let size = canonical_json(&self.arguments).len();
        if size > MAX_ARGUMENTS_BYTES {
            return Err(InvalidIntent::new(
                "arguments",
                format!(
                    "{size} bytes as canonical JSON; at most {MAX_ARGUMENTS_BYTES} are accepted"
                ),
            ));
        }
        for (field, value) in [
            ("business_ref", &self.business_ref),
            ("run_id", &self.run_id),
            ("step", &self.step),
            ("ordering_key", &self.ordering_key),
        ] {
            if let Some(v) = value
                && (v.is_empty() || v.len() > MAX_LABEL_LEN || v.chars().any(char::is_control))
            {
                return Err(InvalidIntent::new(
                    field,
                    format!("must be 1–{MAX_LABEL_LEN} bytes without control characters"),
                ));
            }
        }
        Ok(())
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok() -> NewIntent {
        NewIntent::new(
            IntentNames {
                tenant_id: "tenant-42",
                idempotency_key: "order-8172",
                action: "create_invoice",
            },
            json!({"amount": "12.00"}),
        )
    }

    fn field_of(i: NewIntent) -> String {
        i.validate().expect_err("must be refused").field
    }

    #[test]
    fn a_good_intent_passes() {
        assert_eq!(ok().validate(), Ok(()));
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(
            field_of(NewIntent {
                tenant_id: "".into(),
                ..ok()
            }),
            "tenant_id"
        );
        assert_eq!(
            field_of(NewIntent {
                idempotency_key: "a b".into(),
                ..ok()
            }),
            "idempotency_key"
        );
        assert_eq!(
            field_of(NewIntent {
                idempotency_key: "k".repeat(256),
                ..ok()
            }),
            "idempotency_key"
        );
        assert_eq!(
            field_of(NewIntent {
                action: "".into(),
                ..ok()
            }),
            "action"
        );
        for bad in ["", "a\nb", &"k".repeat(256)] {
            assert_eq!(
                field_of(NewIntent {
                    ordering_key: Some(bad.into()),
                    ..ok()
                }),
                "ordering_key"
            );
        }
        assert_eq!(
            field_of(NewIntent {
                arguments: json!([1]),
                ..ok()
            }),
            "arguments"
        );
        assert_eq!(
            field_of(NewIntent {
                arguments: json!("x"),
                ..ok()
            }),
            "arguments"
        );
        assert_eq!(
            field_of(NewIntent {
                arguments: json!({"n": {"id": 9007199254740993u64}}),
                ..ok()
            }),
            "arguments/n/id"
        );
        assert_eq!(
            field_of(NewIntent {
                arguments: json!({"blob": "x".repeat(MAX_ARGUMENTS_BYTES)}),
                ..ok()
            }),
            "arguments"
        );
        assert_eq!(
            field_of(NewIntent {
                run_id: Some("".into()),
                ..ok()
            }),
            "run_id"
        );
        assert_eq!(
            field_of(NewIntent {
                step: Some("a\nb".into()),
                ..ok()
            }),
            "step"
        );
        let msg = NewIntent {
            arguments: json!(null),
            ..ok()
        }
        .validate()
        .expect_err("refused")
        .to_string();
        assert_eq!(msg, "arguments: must be a JSON object, not null");
    }
}
