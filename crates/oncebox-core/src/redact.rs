//! Redaction: fields that must not be kept are dropped or replaced by a keyed hash before the
//! intent is written to the journal, logs or dead-letter messages (docs/architecture.md,
//! "Guarantees"; docs/security.md).
//!
//! Rules are JSON pointers (RFC 6901) into the intent's `arguments`, configured per action.
//! A pointer that matches nothing is not an error: optional fields are common.
//!
//! # Keyed hashes
//! A plain SHA-256 of a card or phone number is recovered by trying every number. A hashed field
//! is therefore `"hmac-sha256:<key id>:" + hex(HMAC-SHA-256(secret, JCS(value)))`, with a secret
//! from the environment ([`RedactionKeys::ENV`]). The key id travels with the value so that keys
//! can rotate: the first key of the list hashes new intents, and the others still recognise a
//! replay of an intent recorded under them (see [`key_used`]). Values of the unkeyed
//! `"sha256:<hex>"` form, written before keys existed, are recognised the same way.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::hash::canonical_json;

/// The shortest secret accepted: 32 bytes, the size of the hash.
pub const MIN_SECRET_BYTES: usize = 32;

/// One secret of keyed redaction, with the id stored beside every value it hashed. Its
/// `Debug` shows the id only.
#[derive(Clone, PartialEq, Eq)]
pub struct RedactionKey {
    id: String,
    secret: Vec<u8>,
}

impl fmt::Debug for RedactionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedactionKey")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// Why a redaction key, or the list of them, was refused. No message echoes a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactionKeyError {
    /// The id is empty, too long or holds a character outside `A-Z a-z 0-9 . _ -`.
    #[error("key id {0:?} must be 1–32 characters of A-Z a-z 0-9 . _ -")]
    BadId(String),
    /// The secret is shorter than [`MIN_SECRET_BYTES`].
    #[error("the secret of key {id:?} has {len} bytes; at least {MIN_SECRET_BYTES} are needed")]
    ShortSecret {
        /// The key's id.
        id: String,
        /// The secret's length in bytes.
        len: usize,
    },
    /// An entry of the list has no `:` between id and secret (entries count from 1).
    #[error("entry {0} is not id:secret")]
    NotIdSecret(usize),
    /// Two entries share an id.
    #[error("key id {0:?} appears twice")]
    DuplicateId(String),
    /// The environment variable is not valid UTF-8.
    #[error("{} is not valid UTF-8", RedactionKeys::ENV)]
    NotUnicode,
    /// The environment variable holds a list that does not parse.
    #[error("{env}: {0}", env = RedactionKeys::ENV)]
    InEnv(Box<RedactionKeyError>),
}

impl RedactionKey {
    /// A key with id `id` (1–32 of `A-Z a-z 0-9 . _ -`) and a secret of at least
    /// [`MIN_SECRET_BYTES`] bytes.
    ///
    /// # Errors
    /// [`RedactionKeyError`] saying which part is wrong (never echoing the secret).
    pub fn new(id: &str, secret: impl Into<Vec<u8>>) -> Result<RedactionKey, RedactionKeyError> {
        let secret = secret.into();
        if id.is_empty()
            || id.len() > 32
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return Err(RedactionKeyError::BadId(id.to_owned()));
        }
        if secret.len() < MIN_SECRET_BYTES {
            return Err(RedactionKeyError::ShortSecret {
                id: id.to_owned(),
                len: secret.len(),
            });
        }
        Ok(RedactionKey {
            id: id.to_owned(),
            secret,
        })
    }

    /// The key's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// The keys of `hash` redaction: the first hashes new values; the others (older keys, kept
/// while intents recorded under them may still be replayed) only recognise them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedactionKeys {
    keys: Vec<RedactionKey>,
}

impl RedactionKeys {
    /// The environment variable that holds the keys: `id:secret`, several separated by commas,
    /// the current one first (`2026-12:…,2026-06:…`).
    pub const ENV: &'static str = "ONCEBOX_REDACTION_KEYS";

    /// Keys from `current` and the `older` ones still recognised.
    pub fn new(current: RedactionKey, older: impl IntoIterator<Item = RedactionKey>) -> Self {
        RedactionKeys {
            keys: std::iter::once(current).chain(older).collect(),
        }
    }

    /// Parses the [`Self::ENV`] format.
    ///
    /// # Errors
    /// [`RedactionKeyError`] saying what is wrong with which entry, never echoing a secret.
    pub fn parse(text: &str) -> Result<RedactionKeys, RedactionKeyError> {
        let mut keys = Vec::new();
        for (n, entry) in text.split(',').map(str::trim).enumerate() {
            let (id, secret) = entry
                .split_once(':')
                .ok_or(RedactionKeyError::NotIdSecret(n + 1))?;
            let key = RedactionKey::new(id.trim(), secret.as_bytes())?;
            if keys.iter().any(|k: &RedactionKey| k.id == key.id) {
                return Err(RedactionKeyError::DuplicateId(id.to_owned()));
            }
            keys.push(key);
        }
        Ok(RedactionKeys { keys })
    }

    /// The keys in [`Self::ENV`], if it is set.
    ///
    /// # Errors
    /// As [`RedactionKeys::parse`], wrapped in [`RedactionKeyError::InEnv`] so that the message
    /// names the variable.
    pub fn from_env() -> Result<Option<RedactionKeys>, RedactionKeyError> {
        match std::env::var(Self::ENV) {
            Ok(text) => Self::parse(&text)
                .map(Some)
                .map_err(|e| RedactionKeyError::InEnv(Box::new(e))),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(_)) => Err(RedactionKeyError::NotUnicode),
        }
    }

    /// The key that hashes new values.
    pub fn current(&self) -> &RedactionKey {
        &self.keys[0]
    }

    /// The key with id `id`, current or older.
    pub fn get(&self, id: &str) -> Option<&RedactionKey> {
        self.keys.iter().find(|k| k.id == id)
    }

    /// Every key, the current one first.
    pub fn all(&self) -> impl Iterator<Item = &RedactionKey> {
        self.keys.iter()
    }
}

/// How a `hash` rule hashes.
#[derive(Debug, Clone, Copy)]
pub enum HashWith<'a> {
    /// HMAC-SHA-256 with this key: `hmac-sha256:<id>:<hex>`.
    Key(&'a RedactionKey),
    /// The unkeyed `sha256:<hex>` of intents recorded before keys existed; only ever used to
    /// recognise their replays, never for new intents.
    LegacySha256,
}

/// The key a hashed value names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyUsed {
    /// `hmac-sha256:<id>:…`.
    Key(String),
    /// `sha256:…` (before keys).
    LegacySha256,
}

/// What to do with the value at a pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedactMode {
    /// Remove the member (or array element) entirely.
    Drop,
    /// Replace it by its keyed hash, `"hmac-sha256:<key id>:" + hex(HMAC-SHA-256(JCS(value)))`.
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

/// The replacement of a hashed field: `hmac-sha256:<key id>:<hex>` (or, for
/// [`HashWith::LegacySha256`], `sha256:<hex>`), over the value's RFC 8785 form.
pub fn hashed(value: &Value, with: HashWith<'_>) -> String {
    let text = canonical_json(value);
    match with {
        HashWith::Key(key) => {
            let tag = oncebox_signing::hmac_sha256(&key.secret, text.as_bytes());
            format!("hmac-sha256:{}:{}", key.id, hex::encode(tag))
        }
        HashWith::LegacySha256 => format!("sha256:{}", hex::encode(Sha256::digest(text))),
    }
}

/// The key that hashed the first hashed field of `payload` (a journal's redacted arguments)
/// under `rules`; `None` when no hashed field is present.
pub fn key_used(payload: &Value, rules: &[RedactRule]) -> Option<KeyUsed> {
    rules
        .iter()
        .filter(|r| r.mode == RedactMode::Hash)
        .find_map(|r| payload.pointer(&r.pointer)?.as_str())
        .and_then(|v| {
            if let Some(rest) = v.strip_prefix("hmac-sha256:") {
                rest.split_once(':')
                    .map(|(id, _)| KeyUsed::Key(id.to_owned()))
            } else {
                v.starts_with("sha256:").then_some(KeyUsed::LegacySha256)
            }
        })
}

/// Whether any of `rules` hashes (and so needs a key).
pub fn needs_key(rules: &[RedactRule]) -> bool {
    rules.iter().any(|r| r.mode == RedactMode::Hash)
}

/// Whether any of `rules` drops a field (whose value then enters the request hash as a keyed
/// digest: [`apply_and_digest`]).
pub fn drops(rules: &[RedactRule]) -> bool {
    rules.iter().any(|r| r.mode == RedactMode::Drop)
}

/// Applies `rules` to `arguments` in order, hashing with `with` (which a rule set without
/// `hash` rules never uses). Returns whether anything changed.
pub fn apply(arguments: &mut Value, rules: &[RedactRule], with: HashWith<'_>) -> bool {
    apply_and_digest(arguments, rules, with).0
}

/// As [`apply`], and also returns the keyed digest of the values `drop` rules removed — each
/// rule's pointer with the value it removed, in rule order, hashed as a field is
/// ([`hashed`]) — or `None` when nothing was dropped. The digest goes into the request hash,
/// so that a resubmit that differs only in a dropped field is a conflict, never a replay;
/// keyed, so that the stored hash cannot be used to confirm a guess of a dropped value.
pub fn apply_and_digest(
    arguments: &mut Value,
    rules: &[RedactRule],
    with: HashWith<'_>,
) -> (bool, Option<String>) {
    let mut dropped: Vec<Value> = Vec::new();
    let changed = apply_rules(arguments, rules, with, &mut dropped);
    let digest = (!dropped.is_empty()).then(|| hashed(&Value::Array(dropped), with));
    (changed, digest)
}

/// Applies `rules`, pushing `[pointer, value]` for each value a `drop` rule removes.
fn apply_rules(
    arguments: &mut Value,
    rules: &[RedactRule],
    with: HashWith<'_>,
    dropped: &mut Vec<Value>,
) -> bool {
    let mut changed = false;
    let mut note = |rule: &RedactRule, v: Value| {
        dropped.push(Value::Array(vec![Value::String(rule.pointer.clone()), v]));
    };
    for rule in rules {
        let Some((parent_ptr, last)) = rule.pointer.rsplit_once('/') else {
            continue;
        };
        let last = last.replace("~1", "/").replace("~0", "~");
        let Some(parent) = arguments.pointer_mut(parent_ptr) else {
            continue;
        };
        match (parent, rule.mode) {
            (Value::Object(map), RedactMode::Drop) => {
                if let Some(v) = map.remove(&last) {
                    note(rule, v);
                    changed = true;
                }
            }
            (Value::Array(items), RedactMode::Drop) => {
                if let Some(i) = index(&last, items.len()) {
                    note(rule, items.remove(i));
                    changed = true;
                }
            }
            (Value::Object(map), RedactMode::Hash) => {
                if let Some(v) = map.get_mut(&last) {
                    *v = Value::String(hashed(v, with));
                    changed = true;
                }
            }
            (Value::Array(items), RedactMode::Hash) => {
                if let Some(v) = index(&last, items.len()).and_then(|i| items.get_mut(i)) {
                    *v = Value::String(hashed(v, with));
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

    fn key() -> RedactionKey {
        RedactionKey::new("k1", vec![b'k'; 32]).expect("key")
    }

    fn with_key(value: &Value) -> String {
        hashed(value, HashWith::Key(&key()))
    }

    #[test]
    fn a_keyed_hash_is_hmac_sha256_over_the_values_jcs_form() {
        // Computed apart from this code: Python's `hmac.new(b"k" * 32, jcs, hashlib.sha256)`.
        assert_eq!(
            with_key(&json!("4111")),
            "hmac-sha256:k1:867f111ead27ff0e823a0f6297240dabab78c7224390907b11fdc962b23929f5"
        );
        assert_eq!(
            with_key(&json!({"b": [true, null], "a": 1})),
            "hmac-sha256:k1:fe7deb1627c526cc49444b4d6771f85bf73678796737d35cdbe287998bfea9a8"
        );
    }

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
        let k = key();
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
            HashWith::Key(&k),
        );
        assert!(changed);
        assert_eq!(
            args,
            json!({
                "card": {"number": with_key(&json!("4111111111111111"))},
                "email": with_key(&json!("ana@example.com")),
                "lines": [{"sku": "b"}]
            })
        );
        // python3 -c 'import hmac,hashlib; print(hmac.new(b"k"*32, b"\"ana@example.com\"",
        //   hashlib.sha256).hexdigest())'
        assert_eq!(
            with_key(&json!("ana@example.com")),
            "hmac-sha256:k1:69b74ce9c2705e72cb4cf13fc82dcc4d9de28a5d8bd964cb69d17fe5e9ed302d"
        );
        // echo -n '"ana@example.com"' | sha256sum — the unkeyed form of older intents.
        assert_eq!(
            hashed(&json!("ana@example.com"), HashWith::LegacySha256),
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
            ],
            HashWith::Key(&key())
        ));
        assert_eq!(args, json!({"a": 1, "list": [1]}));
    }

    #[test]
    fn keys_parse_rotate_and_never_show_their_secret() {
        let secret = "s".repeat(32);
        let keys = RedactionKeys::parse(&format!("new:{secret}, old:{}", "o".repeat(40)))
            .expect("two keys");
        assert_eq!(keys.current().id(), "new");
        assert!(keys.get("old").is_some() && keys.get("gone").is_none());
        assert!(!format!("{keys:?}").contains(&secret), "{keys:?}");
        for (bad, says) in [
            ("nocolon", "id:secret"),
            ("k:short", "at least 32"),
            (&format!("a b:{secret}"), "key id"),
            (&format!("k:{secret},k:{secret}"), "twice"),
        ] {
            let e = RedactionKeys::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(says) && !e.contains(&secret), "{bad}: {e}");
        }
        // Which key hashed a journal's payload: the replay of an older intent is recognised.
        let rules = [rule("/card", RedactMode::Hash)];
        let old = keys.get("old").expect("old");
        let mut payload = json!({"card": "4111"});
        apply(&mut payload, &rules, HashWith::Key(old));
        assert_eq!(key_used(&payload, &rules), Some(KeyUsed::Key("old".into())));
        let mut legacy = json!({"card": "4111"});
        apply(&mut legacy, &rules, HashWith::LegacySha256);
        assert_eq!(key_used(&legacy, &rules), Some(KeyUsed::LegacySha256));
        assert_eq!(key_used(&json!({}), &rules), None);
        assert_ne!(payload, legacy, "keyed and unkeyed hashes differ");
    }

    #[test]
    fn pointer_syntax() {
        assert!(rule("/a/b~0c~1d", RedactMode::Drop).validate().is_ok());
        for bad in ["", "a/b", "/a~2", "/a~"] {
            assert!(rule(bad, RedactMode::Drop).validate().is_err(), "{bad:?}");
        }
    }
}
