//! The bodies of the fuzz targets in `fuzz/` (run with `scripts/fuzz.sh`), kept here so that the
//! test suite runs the very same checks over the seed corpus and over every input a fuzzing run
//! ever found to fail (`fuzz/regressions/`), on the stable toolchain.
//!
//! Each body takes arbitrary bytes and must neither panic nor break the property it asserts.

use crate::config::Config;
use crate::hash::{canonical_json, request_hash};
use crate::intent::{IntentNames, NewIntent};
use crate::json;
use crate::key::{parse_key_header, validate_key};
use crate::redact::{self, HashWith, RedactMode, RedactRule, RedactionKey};

/// The `Idempotency-Key` header parser: whatever it accepts is a valid key, and the key's own
/// sf-string form parses back to it.
pub fn idempotency_key_header(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(key) = parse_key_header(raw) else {
        return;
    };
    assert!(
        validate_key(&key).is_ok(),
        "accepted an invalid key {key:?}"
    );
    let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
    assert_eq!(
        parse_key_header(&quoted).as_deref(),
        Ok(key.as_str()),
        "{key:?} as an sf-string"
    );
}

/// The intake's JSON path: text read exactly, the intent's checks, redaction and the request
/// hash. Arguments the intake accepts hash the same after a round trip through their canonical
/// form, and redaction removes (or keys) what a rule names.
pub fn intake_json(data: &[u8]) {
    let Ok(arguments) = json::parse(data) else {
        return;
    };
    let intent = NewIntent::new(
        IntentNames {
            tenant_id: "tenant",
            idempotency_key: "key",
            action: "action",
        },
        arguments.clone(),
    );
    if intent.validate().is_err() {
        return;
    }
    let canonical = canonical_json(&arguments);
    let again = json::parse(canonical.as_bytes())
        .unwrap_or_else(|e| panic!("the canonical form {canonical} is refused: {e}"));
    assert_eq!(
        request_hash("action", &again),
        request_hash("action", &arguments),
        "{canonical}"
    );
    let Some(name) = arguments.as_object().and_then(|m| m.keys().next()).cloned() else {
        return;
    };
    let pointer = format!("/{}", name.replace('~', "~0").replace('/', "~1"));
    let key = RedactionKey::new("fuzz", vec![7u8; 32]).expect("a valid key");
    for mode in [RedactMode::Drop, RedactMode::Hash] {
        let mut redacted = arguments.clone();
        let rules = [RedactRule {
            pointer: pointer.clone(),
            mode,
        }];
        assert!(rules[0].validate().is_ok(), "{pointer:?}");
        assert!(redact::apply(&mut redacted, &rules, HashWith::Key(&key)));
        match mode {
            RedactMode::Drop => assert!(redacted.get(&name).is_none(), "{pointer} kept"),
            RedactMode::Hash => assert!(
                redacted[&name]
                    .as_str()
                    .is_some_and(|v| v.starts_with("hmac-sha256:fuzz:")),
                "{pointer} not keyed: {redacted}"
            ),
        }
    }
}

/// The configuration loader: any text is a configuration or an error, never a panic, and a
/// configuration's `${NAME}` references resolve or name their field.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_toml(text) {
        Ok(mut config) => {
            if let Err(e) = config.resolve_env(|name| (name.len() % 2 == 0).then(String::new)) {
                assert!(
                    !e.field.is_empty(),
                    "an unresolved reference names its field"
                );
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}
