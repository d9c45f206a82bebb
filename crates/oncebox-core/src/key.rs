//! Idempotency keys: what a valid key is, and helpers that derive stable keys.
//!
//! A key names one intent for ever (until retention purge). Derived keys are SHA-256 digests, so
//! they show no input in clear text; the digest is not keyed, though, so an input that can be
//! guessed (an order number, an e-mail address) can be recovered by hashing guesses.

use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::hash::canonical_json;

/// Longest accepted idempotency key, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// Why a key (or another key-shaped identifier such as a tenant id) was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The key is the empty string.
    #[error("must not be empty")]
    Empty,
    /// The key is longer than allowed.
    #[error("is {len} bytes long; at most {max} are allowed")]
    TooLong {
        /// The key's length in bytes.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The key holds a character outside printable ASCII (0x21–0x7E), such as a space.
    #[error("holds {found:?} at byte {position}; only printable ASCII without spaces is allowed")]
    BadCharacter {
        /// The offending character.
        found: char,
        /// Its byte offset.
        position: usize,
    },
    /// The key is `.` or `..`: a URL path cannot carry it (every URL parser removes such a
    /// segment, even percent-encoded), so it could not be read back or looked up by key.
    #[error("is {0:?}, a dot segment that no URL path can carry; use another key")]
    DotSegment(&'static str),
}

/// Checks that `key` is 1–255 printable ASCII characters with no whitespace or control
/// characters, and not `.` or `..`, as docs/architecture.md ("Vocabulary") defines an
/// idempotency key. A key travels in URL paths (`/v1/intents/{key}`, a lookup's `{key}`), where
/// a dot segment would name another resource.
///
/// # Errors
/// [`KeyError`] saying what is wrong and where.
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    validate_token(key, MAX_KEY_LEN)?;
    match key {
        "." => Err(KeyError::DotSegment(".")),
        ".." => Err(KeyError::DotSegment("..")),
        _ => Ok(()),
    }
}

/// Checks a key-shaped identifier (printable ASCII, no spaces) of at most `max` bytes.
///
/// # Errors
/// [`KeyError`] saying what is wrong and where.
pub fn validate_token(value: &str, max: usize) -> Result<(), KeyError> {
    if value.is_empty() {
        return Err(KeyError::Empty);
    }
    if let Some((position, found)) = value.char_indices().find(|(_, c)| !(c.is_ascii_graphic())) {
        return Err(KeyError::BadCharacter { found, position });
    }
    if value.len() > max {
        return Err(KeyError::TooLong {
            len: value.len(),
            max,
        });
    }
    Ok(())
}

/// Why an `Idempotency-Key` header was refused; the message is worded for a 400's detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyHeaderError {
    /// A quoted value has no closing quote.
    #[error("unterminated sf-string")]
    Unterminated,
    /// A backslash is followed by something other than `"` or `\`.
    #[error("invalid escape in sf-string")]
    BadEscape,
    /// A quote inside a quoted value is not escaped.
    #[error("unescaped quote in sf-string")]
    UnescapedQuote,
    /// The key itself is not valid.
    #[error("Idempotency-Key {0}")]
    Key(#[from] KeyError),
}

/// Parses the value of an `Idempotency-Key` header: a bare token, or an RFC 8941 sf-string
/// (`"..."` with `\"` and `\\` escapes), surrounding spaces ignored; the key must then be
/// valid ([`validate_key`]).
///
/// # Errors
/// [`KeyHeaderError`], worded for a 400's detail.
pub fn parse_key_header(raw: &str) -> Result<String, KeyHeaderError> {
    let raw = raw.trim();
    let key = if let Some(inner) = raw.strip_prefix('"') {
        let inner = inner
            .strip_suffix('"')
            .ok_or(KeyHeaderError::Unterminated)?;
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some(e @ ('"' | '\\')) => out.push(e),
                    _ => return Err(KeyHeaderError::BadEscape),
                },
                '"' => return Err(KeyHeaderError::UnescapedQuote),
                c => out.push(c),
            }
        }
        out
    } else {
        raw.to_owned()
    };
    validate_key(&key)?;
    Ok(key)
}

/// A key for "this version of this business object, acted on by this action, for this tenant":
/// lowercase hex SHA-256 of `tenant|action|business_id|version`.
///
/// Use it when the agent's intent is tied to a business object (an order, an invoice) so that
/// two agents deciding the same thing converge on one key.
pub fn business_key(tenant: &str, action: &str, business_id: &str, version: &str) -> String {
    let mut h = Sha256::new();
    for (i, part) in [tenant, action, business_id, version].iter().enumerate() {
        if i > 0 {
            h.update(b"|");
        }
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// A key for "this step of this agent session calling this tool with these arguments":
/// lowercase hex SHA-256 of `session:step:tool:` followed by the JCS form of `arguments`.
///
/// A replayed step of the same session (an orchestrator restarted mid-run) gets the same key.
/// Numbers beyond ±2^53 lose precision under JCS; pass such values as strings.
pub fn step_key(session: &str, step: u64, tool: &str, arguments: &serde_json::Value) -> String {
    let mut h = Sha256::new();
    h.update(format!("{session}:{step}:{tool}:").as_bytes());
    h.update(canonical_json(arguments).as_bytes());
    hex::encode(h.finalize())
}

/// How long identical calls that name no key and no run are one intent, when the action says
/// nothing else (`[actions.X.tool] dedupe_window`).
pub const DEFAULT_DEDUPE_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The identity of a tool call that names no key and no run: its tool and identifying
/// arguments, one intent per dedupe window.
///
/// A call at time `t` takes the key of the window `t` falls in (`call-<digest>-<n>`, windows
/// counted from the Unix epoch) — unless the previous window's key names an intent created less
/// than a window before `t`: then it takes that one. So identical calls within a window of the
/// first are one intent (wherever the window boundary falls), the first identical call a window
/// or more after it starts a new one, and concurrent identical calls agree (the key is the same;
/// the journal's unique key makes them one intent). The digest is the hex SHA-256 of
/// `tool:` + the tool + `:` + the JCS form of the identifying arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallIdentity {
    digest: String,
    window: Duration,
}

impl CallIdentity {
    /// The identity of tool `tool` called with `identifying` (its identifying arguments), one
    /// intent per `window` (at least a second).
    pub fn new(tool: &str, identifying: &serde_json::Value, window: Duration) -> CallIdentity {
        let mut h = Sha256::new();
        h.update(format!("tool:{tool}:").as_bytes());
        h.update(canonical_json(identifying).as_bytes());
        CallIdentity {
            digest: hex::encode(h.finalize()),
            window: window.max(Duration::from_secs(1)),
        }
    }

    /// The identity of tool `tool` called with `arguments`, identified by the values at
    /// `pointers` (JSON pointers into the arguments; all of the arguments when `None`).
    ///
    /// # Errors
    /// The field (`arguments/order_id`) an identifying argument is missing from, and why.
    pub fn of(
        tool: &str,
        arguments: &serde_json::Value,
        pointers: Option<&[&str]>,
        window: Duration,
    ) -> Result<CallIdentity, crate::invalid::InvalidIntent> {
        let identifying = match pointers {
            None => arguments.clone(),
            Some(pointers) => serde_json::Value::Array(
                pointers
                    .iter()
                    .map(|p| {
                        arguments.pointer(p).cloned().ok_or_else(|| {
                            crate::invalid::InvalidIntent::new(
                                format!("arguments{p}"),
                                "is required: it identifies the call (the tool's key)",
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        Ok(CallIdentity::new(tool, &identifying, window))
    }

    /// The dedupe window.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// The key of the window `at` falls in, and the key of the window before it.
    pub fn keys_at(&self, at: SystemTime) -> (String, String) {
        let secs = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let n = secs / self.window.as_secs().max(1);
        let key = |n: u64| format!("call-{}-{n}", self.digest);
        (key(n), key(n.saturating_sub(1)))
    }

    /// The key a call at `at` takes, given when the previous window's intent was created (if it
    /// exists): that intent's key while `at` is less than a window after it, else the current
    /// window's.
    pub fn key_for(&self, at: SystemTime, previous_created: Option<SystemTime>) -> String {
        let (current, previous) = self.keys_at(at);
        match previous_created {
            Some(created)
                if previous != current
                    && at.duration_since(created).unwrap_or_default() < self.window =>
            {
                previous
            }
            _ => current,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_printable_ascii_up_to_255() {
        assert_eq!(validate_key("a"), Ok(()));
        assert_eq!(validate_key("order-8172:create_invoice/v1~!"), Ok(()));
        assert_eq!(validate_key(&"k".repeat(255)), Ok(()));
        for dotted in ["...", ".a", "a/../b", "%2E", "a.."] {
            assert_eq!(validate_key(dotted), Ok(()), "{dotted}");
        }
    }

    #[test]
    fn refuses_dot_segments() {
        assert_eq!(validate_key("."), Err(KeyError::DotSegment(".")));
        assert_eq!(validate_key(".."), Err(KeyError::DotSegment("..")));
        assert!(
            KeyError::DotSegment("..")
                .to_string()
                .contains("dot segment")
        );
    }

    #[test]
    fn refuses_empty_long_spaces_controls_and_non_ascii() {
        assert_eq!(validate_key(""), Err(KeyError::Empty));
        assert_eq!(
            validate_key(&"k".repeat(256)),
            Err(KeyError::TooLong { len: 256, max: 255 })
        );
        assert_eq!(
            validate_key("a b"),
            Err(KeyError::BadCharacter {
                found: ' ',
                position: 1
            })
        );
        assert!(matches!(
            validate_key("a\tb"),
            Err(KeyError::BadCharacter { found: '\t', .. })
        ));
        assert!(matches!(
            validate_key("a\u{7f}"),
            Err(KeyError::BadCharacter { .. })
        ));
        assert!(matches!(
            validate_key("clé"),
            Err(KeyError::BadCharacter { found: 'é', .. })
        ));
    }

    #[test]
    fn business_key_is_sha256_of_pipe_joined_parts() {
        // echo -n 'tenant-42|create_invoice|order-8172|3' | sha256sum
        assert_eq!(
            business_key("tenant-42", "create_invoice", "order-8172", "3"),
            "0262372410cb2f647caf5119744aa6a9ba4504dd2a31a5bb6f310eef0e7031ec"
        );
        assert!(validate_key(&business_key("t", "a", "1", "1")).is_ok());
    }

    #[test]
    fn a_call_identity_is_one_key_per_window_from_its_first_call() {
        let id = CallIdentity::new("t", &json!({"b": 1, "a": 2}), Duration::from_secs(100));
        let same = CallIdentity::new("t", &json!({"a": 2, "b": 1}), Duration::from_secs(100));
        assert_eq!(id, same, "canonical: the order of members does not matter");
        assert_ne!(
            id,
            CallIdentity::new("u", &json!({"a": 2, "b": 1}), Duration::from_secs(100))
        );
        let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let (k10, k9) = id.keys_at(at(1_050));
        assert!(k10.ends_with("-10") && k9.ends_with("-9"), "{k10} {k9}");
        assert!(k10.starts_with("call-") && validate_key(&k10).is_ok());
        // First call at 1,090 (window 10); a call at 1,150 (window 11) is 60 s after it: one.
        assert_eq!(
            id.key_for(at(1_150), Some(at(1_090))),
            id.keys_at(at(1_090)).0
        );
        // At 1,195, 105 s after it: a new intent, in window 11.
        assert_eq!(
            id.key_for(at(1_195), Some(at(1_090))),
            id.keys_at(at(1_195)).0
        );
        // No intent in the previous window: the current one.
        assert_eq!(id.key_for(at(1_150), None), id.keys_at(at(1_150)).0);
        // At the epoch's first window there is no previous one.
        assert_eq!(id.key_for(at(5), Some(at(1))), id.keys_at(at(5)).0);
    }

    #[test]
    fn step_key_uses_canonical_arguments() {
        let a = step_key("s1", 3, "create_invoice", &json!({"b": 1, "a": [1, 2]}));
        let b = step_key("s1", 3, "create_invoice", &json!({"a": [1, 2], "b": 1}));
        assert_eq!(a, b);
        // echo -n 's1:3:create_invoice:{"a":[1,2],"b":1}' | sha256sum
        assert_eq!(
            a,
            "e587bf96c7c0d4cd92648bc4a8569fdea59ebc802b3494e27113a7fd09edbe43"
        );
        assert_ne!(
            a,
            step_key("s1", 4, "create_invoice", &json!({"a": [1, 2], "b": 1}))
        );
    }
}
