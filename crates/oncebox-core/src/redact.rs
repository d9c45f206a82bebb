//! Redaction: fields that must not be kept are dropped or replaced by their hash before the
//! intent is written to the journal, logs or dead-letter messages (docs/architecture.md, "Guarantees").
//!
//! Rules are JSON pointers (RFC 6901) into the intent's `arguments`, configured per action.
//! A pointer that matches nothing is not an error: optional fields are common.

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::hash::canonical_json;

/// What to do with the value at a pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactMode {
    /// Remove the member (or array element) entirely.
    Drop,
    /// Replace it by `"sha256:" + hex(SHA-256(JCS(value)))`.
    Hash,
}

/// One redaction rule: a JSON pointer into `arguments` and what to do with it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactRule {
    /// RFC 6901 pointer into the arguments, such as `/card/number`.
    pub pointer: String,
    /// Drop the value or replace it by its hash.
    pub mode: RedactMode,
}

/// A pointer that is not RFC 6901.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{pointer:?} is not a JSON pointer: it must be empty or start with '/', and '~' must be followed by 0 or 1"
)]
pub struct BadPointer {
    /// The offending pointer.
    pub pointer: String,
}

impl RedactRule {
    /// Checks the pointer's syntax. The empty pointer (the whole document) is refused: redact
    /// fields, not the request.
    ///
    /// # Errors
    /// [`BadPointer`].
    pub fn validate(&self) -> Result<(), BadPointer> {
        let bad = || BadPointer {
            pointer: self.pointer.clone(),
        };
        if !self.pointer.starts_with('/') {
            return Err(bad());
        }
        let mut chars = self.pointer.chars();
        while let Some(c) = chars.next() {
            if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                return Err(bad());
            }
        }
        Ok(())
    }
}

/// `"sha256:" + hex(SHA-256(JCS(value)))`, the replacement of a hashed field.
pub fn hashed(value: &Value) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
    )
}

/// Applies `rules` to `arguments` in order. Returns whether anything changed.
pub fn apply(arguments: &mut Value, rules: &[RedactRule]) -> bool {
    let mut changed = false;
    for rule in rules {
        let Some((parent_ptr, last)) = rule.pointer.rsplit_once('/') else {
            continue;
        };
        let last = last.replace("~1", "/").replace("~0", "~");
        let Some(parent) = arguments.pointer_mut(parent_ptr) else {
            continue;
        };
        match (parent, rule.mode) {
            (Value::Object(map), RedactMode::Drop) => changed |= map.remove(&last).is_some(),
            (Value::Array(items), RedactMode::Drop) => {
                if let Some(i) = index(&last, items.len()) {
                    items.remove(i);
                    changed = true;
                }
            }
            (Value::Object(map), RedactMode::Hash) => {
                if let Some(v) = map.get_mut(&last) {
                    *v = Value::String(hashed(v));
                    changed = true;
                }
            }
            (Value::Array(items), RedactMode::Hash) => {
                if let Some(v) = index(&last, items.len()).and_then(|i| items.get_mut(i)) {
                    *v = Value::String(hashed(v));
                    changed = true;
                }
            }
            _ => {}
        }
    }
    changed
}

fn index(token: &str, len: usize) -> Option<usize> {
    let valid =
        token == "0" || (!token.starts_with('0') && token.bytes().all(|b| b.is_ascii_digit()));
    token.parse::<usize>().ok().filter(|i| valid && *i < len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(pointer: &str, mode: RedactMode) -> RedactRule {
        RedactRule {
            pointer: pointer.into(),
            mode,
        }
    }

    #[test]
    fn drops_and_hashes_nested_fields() {
        let mut args = json!({
            "card": {"number": "4111111111111111", "cvc": "123"},
            "email": "ana@example.com",
            "lines": [{"sku": "a"}, {"sku": "b"}],
            "a/b": 1
        });
        let changed = apply(
            &mut args,
            &[
                rule("/card/cvc", RedactMode::Drop),
                rule("/card/number", RedactMode::Hash),
                rule("/email", RedactMode::Hash),
                rule("/lines/0", RedactMode::Drop),
                rule("/a~1b", RedactMode::Drop),
                rule("/missing/field", RedactMode::Drop),
            ],
        );
        assert!(changed);
        assert_eq!(
            args,
            json!({
                "card": {"number": hashed(&json!("4111111111111111"))},
                "email": hashed(&json!("ana@example.com")),
                "lines": [{"sku": "b"}]
            })
        );
        // echo -n '"ana@example.com"' | sha256sum
        assert_eq!(
            hashed(&json!("ana@example.com")),
            "sha256:696ade37972b858152639451ce273a75e1e9f2f5f791b9c6de816d59498d6210"
        );
    }

    #[test]
    fn nothing_matched_means_unchanged() {
        let mut args = json!({"a": 1, "list": [1]});
        assert!(!apply(
            &mut args,
            &[
                rule("/b", RedactMode::Drop),
                rule("/list/01", RedactMode::Hash),
                rule("/list/5", RedactMode::Drop)
            ]
        ));
        assert_eq!(args, json!({"a": 1, "list": [1]}));
    }

    #[test]
    fn pointer_syntax() {
        assert!(rule("/a/b~0c~1d", RedactMode::Drop).validate().is_ok());
        for bad in ["", "a/b", "/a~2", "/a~"] {
            assert!(rule(bad, RedactMode::Drop).validate().is_err(), "{bad:?}");
        }
    }
}
