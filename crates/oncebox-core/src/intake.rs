//! What an intent is recorded as, decided once for every language: the action must be
//! configured, its redaction rules applied (keyed with the current redaction key), and the
//! request hash taken over the redacted arguments; on a key that already exists, whether the
//! new request is a replay of the recorded one (also across a rotation of redaction keys).
//!
//! The Rust store (`oncebox_store::Intake`) and the Python binding both call this: neither
//! re-implements a rule.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::{Approval, Config};
use crate::hash::request_hash_dropping;
use crate::intent::{InvalidIntent, NewIntent};
use crate::key::CallIdentity;
use crate::redact::{self, HashWith, KeyUsed, RedactRule, RedactionKeys};
use crate::request_hash;
use crate::schema::ArgumentsSchema;

/// An intent as the journal records it ([`Rules::recorded`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The arguments after redaction.
    pub payload: Value,
    /// Whether redaction changed them.
    pub redacted: bool,
    /// The request hash over the action and the redacted arguments.
    pub request_hash: String,
}

/// An action redacts a field and no redaction key was given: a `hash` rule needs one to hash,
/// a `drop` rule to put a keyed digest of what it drops into the request hash (so that a
/// resubmit with another value there is a conflict).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "action {action:?} redacts {pointer} by {mode}, which needs a secret key: set {} to \
     `id:secret` (at least {} bytes of secret; see docs/security.md)",
    RedactionKeys::ENV,
    redact::MIN_SECRET_BYTES
)]
pub struct MissingRedactionKey {
    /// The action whose rule needs the key.
    pub action: String,
    /// The rule's pointer.
    pub pointer: String,
    /// The rule's mode: `hash` or `drop`.
    pub mode: &'static str,
}

/// The configured actions with their redaction rules, and the keys that hash.
///
/// Cheap to share (the keys are behind an `Arc`): build one at start-up.
#[derive(Debug, Clone)]
pub struct Rules {
    actions: BTreeMap<String, ActionRules>,
    keys: Option<Arc<RedactionKeys>>,
}

/// What one action's intents must pass and how they are recorded.
#[derive(Debug, Clone, Default)]
struct ActionRules {
    redact: Vec<RedactRule>,
    schema: Option<ArgumentsSchema>,
    lane: Lane,
    /// How a call that names no key and no run is identified: its `[actions.X.tool]` key and
    /// dedupe window (none: all the arguments, a day).
    identity: Option<(Vec<String>, Duration)>,
    /// Which intents wait for people before they are sent (`[actions.X.approval]`).
    approval: Option<Approval>,
}

/// What an action's approval policy asks of one intent ([`Rules::approval`]): it is written
/// `awaiting_approval` and sent only once this many distinct people approved it, within the
/// window (or before its own deadline, when earlier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalNeeded {
    /// How many distinct people must approve it.
    pub approvals: NonZeroU32,
    /// How long it waits for them.
    pub window: Duration,
}

/// Where an action's intents that carry an ordering key queue: the lanes of its destination,
/// with that destination's policy for a failed head ([`Rules::lane`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lane {
    /// The destination's name; a lane is one (tenant, destination, ordering key).
    pub destination: String,
    /// Whether the lane goes on past a head that ended failed, expired or needs_review
    /// (`on_failure = "skip"`) instead of waiting for an operator.
    pub skip_failed: bool,
}

impl Rules {
    /// The rules of the actions of `config`, hashing with `keys` (usually
    /// [`RedactionKeys::from_env`]).
    ///
    /// # Errors
    /// [`MissingRedactionKey`] when a rule hashes and `keys` is `None`: refuse to start.
    pub fn new(config: &Config, keys: Option<RedactionKeys>) -> Result<Self, MissingRedactionKey> {
        Self::build(
            config.actions.iter().map(|(name, a)| {
                let skip_failed = config.destinations.get(&a.destination).is_some_and(|d| {
                    d.shared().ordering.on_failure == crate::config::LaneFailure::Skip
                });
                let rules = ActionRules {
                    redact: a.redact.clone(),
                    schema: a.arguments_schema.clone(),
                    lane: Lane {
                        destination: a.destination.clone(),
                        skip_failed,
                    },
                    identity: a.tool.as_ref().map(|t| {
                        let key = t.key.iter().flatten().map(|p| p.as_str().to_owned());
                        (key.collect(), t.dedupe_window.get())
                    }),
                    approval: a.approval.clone(),
                };
                (name.clone(), rules)
            }),
            keys,
        )
    }

    /// The rules of the given actions, hashing with `keys`. Without a configuration, each
    /// action's ordering lanes are named after the action, and they block on a failed head.
    ///
    /// # Errors
    /// As [`Rules::new`].
    pub fn from_actions(
        actions: impl IntoIterator<Item = (String, Vec<RedactRule>)>,
        keys: Option<RedactionKeys>,
    ) -> Result<Self, MissingRedactionKey> {
        Self::build(
            actions.into_iter().map(|(name, redact)| {
                let rules = ActionRules {
                    redact,
                    schema: None,
                    lane: Lane {
                        destination: name.clone(),
                        skip_failed: false,
                    },
                    identity: None,
                    approval: None,
                };
                (name, rules)
            }),
            keys,
        )
    }

    fn build(
        actions: impl IntoIterator<Item = (String, ActionRules)>,
        keys: Option<RedactionKeys>,
    ) -> Result<Self, MissingRedactionKey> {
        let actions: BTreeMap<String, ActionRules> = actions.into_iter().collect();
        if keys.is_none() {
            let redacting = actions
                .iter()
                .find_map(|(action, rules)| rules.redact.first().map(|r| (action, r)));
            if let Some((action, rule)) = redacting {
                return Err(MissingRedactionKey {
                    action: action.clone(),
                    pointer: rule.pointer.clone(),
                    mode: match rule.mode {
                        redact::RedactMode::Hash => "hash",
                        redact::RedactMode::Drop => "drop",
                    },
                });
            }
        }
        Ok(Rules {
            actions,
            keys: keys.map(Arc::new),
        })
    }

    /// The names of the configured actions, in order.
    pub fn actions(&self) -> impl Iterator<Item = &str> {
        self.actions.keys().map(String::as_str)
    }

    /// The lanes `action`'s intents with an ordering key queue in.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming `action` when it is not configured.
    pub fn lane(&self, action: &str) -> Result<&Lane, InvalidIntent> {
        self.action(action).map(|a| &a.lane)
    }

    /// The identity of a call of `action` with `arguments` that names no key and no run
    /// ([`CallIdentity`]): identified by its `[actions.X.tool]` key (all the arguments without
    /// one) within its dedupe window (a day by default).
    ///
    /// # Errors
    /// [`InvalidIntent`] naming `action` when it is not configured, or the identifying argument
    /// that is missing.
    pub fn call_identity(
        &self,
        action: &str,
        arguments: &Value,
    ) -> Result<CallIdentity, InvalidIntent> {
        let rules = self.action(action)?;
        let (pointers, window) = match &rules.identity {
            Some((pointers, window)) => (
                (!pointers.is_empty()).then(|| pointers.iter().map(String::as_str).collect()),
                *window,
            ),
            None => (None, crate::key::DEFAULT_DEDUPE_WINDOW),
        };
        let pointers: Option<Vec<&str>> = pointers;
        CallIdentity::of(action, arguments, pointers.as_deref(), window)
    }

    /// What `action`'s approval policy asks of an intent with `arguments` (the caller's, before
    /// redaction): `None` when it is sent without waiting for anyone.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming `action` when it is not configured.
    pub fn approval(
        &self,
        action: &str,
        arguments: &Value,
    ) -> Result<Option<ApprovalNeeded>, InvalidIntent> {
        let policy = self.action(action)?.approval.as_ref();
        Ok(policy
            .filter(|p| p.required_for(arguments))
            .map(|p| ApprovalNeeded {
                approvals: p.approvals,
                window: p.expires_after.get(),
            }))
    }

    /// The fields of `action`'s intents an approver is shown as they will be delivered (JSON
    /// pointers): every field its approval condition tests, then every redacted field, each
    /// once. Empty for an unknown action or one without an approval policy.
    pub fn approver_fields(&self, action: &str) -> Vec<String> {
        let Some(rules) = self.actions.get(action) else {
            return Vec::new();
        };
        let Some(approval) = &rules.approval else {
            return Vec::new();
        };
        let mut fields: Vec<String> = Vec::new();
        let redacted = rules.redact.iter().map(|r| r.pointer.as_str());
        for pointer in approval.tested().chain(redacted) {
            if !fields.iter().any(|f| f == pointer) {
                fields.push(pointer.to_owned());
            }
        }
        fields
    }

    /// The JSON Schema of `action`'s arguments, if it has one.
    pub fn schema(&self, action: &str) -> Option<&ArgumentsSchema> {
        self.actions.get(action)?.schema.as_ref()
    }

    /// The redaction rules of `action`.
    fn rules(&self, action: &str) -> Result<&[RedactRule], InvalidIntent> {
        self.action(action).map(|a| a.redact.as_slice())
    }

    /// The rules of `action`, or the refusal naming the configured ones.
    fn action(&self, action: &str) -> Result<&ActionRules, InvalidIntent> {
        self.actions.get(action).ok_or_else(|| {
            let known: Vec<&str> = self.actions.keys().map(String::as_str).collect();
            InvalidIntent::new(
                "action",
                format!(
                    "no action named {action:?} is configured (configured: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }

    /// Checks every field of `intent` — and its arguments against the action's JSON Schema —
    /// and returns what it is recorded as: the first step of every submit, in Rust and in
    /// Python.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming the field (bad key, non-object arguments, unknown action, a
    /// value the schema refuses…).
    pub fn prepare(&self, intent: &NewIntent) -> Result<Recorded, InvalidIntent> {
        intent.validate()?;
        if let Some(schema) = &self.action(&intent.action)?.schema {
            schema.check(&intent.arguments)?;
        }
        self.recorded(&intent.action, &intent.arguments)
    }

    /// What an intent of `action` with `arguments` is recorded as: the arguments redacted by the
    /// action's rules (keyed with the current key) and the request hash over them — exactly what
    /// a submit stores and compares, and what `oncebox hash --config` prints.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming `action` when it is not configured.
    pub fn recorded(&self, action: &str, arguments: &Value) -> Result<Recorded, InvalidIntent> {
        let mut payload = arguments.clone();
        let (redacted, dropped) =
            redact::apply_and_digest(&mut payload, self.rules(action)?, self.hash_with());
        let request_hash = request_hash_dropping(action, &payload, dropped.as_deref());
        Ok(Recorded {
            payload,
            redacted,
            request_hash,
        })
    }

    /// Whether a submit of `action` with `arguments`, whose key already names an intent
    /// recorded with `recorded_hash` and `recorded_payload`, is a replay of it (the caller
    /// returns that intent) rather than a conflict (the caller refuses and writes nothing).
    ///
    /// `submitted_hash` is this request's hash ([`Recorded::request_hash`]). The two hashes
    /// differ for a replay only when the recorded intent was redacted with a key other than the
    /// current one (rotated since), or before keys, or before dropped values entered the hash:
    /// its hash is then recomputed each way it may have been made.
    pub fn is_replay(
        &self,
        action: &str,
        arguments: &Value,
        submitted_hash: &str,
        recorded_hash: &str,
        recorded_payload: &Value,
    ) -> bool {
        submitted_hash == recorded_hash
            || self
                .hashes_as_recorded(action, arguments, recorded_payload)
                .iter()
                .any(|h| h == recorded_hash)
    }

    /// How new intents are hashed: with the current key (there is one whenever a rule hashes:
    /// the constructors check).
    fn hash_with(&self) -> HashWith<'_> {
        self.keys
            .as_deref()
            .map_or(HashWith::LegacySha256, |k| HashWith::Key(k.current()))
    }

    /// The request hashes `arguments` may have been recorded with other than the current way:
    /// hashed fields under the key `payload` names (when not the current one) or before keys;
    /// dropped values digested under any known key (a payload keeps no trace of which), or
    /// not digested at all (intents recorded before dropped values entered the hash).
    fn hashes_as_recorded(&self, action: &str, arguments: &Value, payload: &Value) -> Vec<String> {
        let Ok(rules) = self.rules(action) else {
            return Vec::new();
        };
        let mut ways: Vec<HashWith<'_>> = Vec::new();
        match redact::key_used(payload, rules) {
            Some(KeyUsed::LegacySha256) => ways.push(HashWith::LegacySha256),
            Some(KeyUsed::Key(id)) => {
                if let Some(key) = self.keys.as_deref().and_then(|k| k.get(&id)) {
                    ways.push(HashWith::Key(key));
                }
            }
            None if redact::drops(rules) => {
                ways.extend(self.keys.iter().flat_map(|k| k.all()).map(HashWith::Key));
            }
            None => {}
        }
        let mut hashes = Vec::new();
        for with in ways {
            let mut redacted = arguments.clone();
            let (_, dropped) = redact::apply_and_digest(&mut redacted, rules, with);
            hashes.push(request_hash_dropping(action, &redacted, dropped.as_deref()));
            if dropped.is_some() {
                hashes.push(request_hash(action, &redacted));
            }
        }
        hashes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::IntentNames;
    use crate::redact::{RedactMode, RedactionKey};
    use serde_json::json;

    fn hashing_card(keys: Option<RedactionKeys>) -> Rules {
        let rule = RedactRule {
            pointer: "/card".into(),
            mode: RedactMode::Hash,
        };
        Rules::from_actions([("pay".to_owned(), vec![rule])], keys).expect("keys given")
    }

    fn key(id: &str) -> RedactionKey {
        RedactionKey::new(id, id.repeat(32)).expect("valid key")
    }

    #[test]
    fn a_hashing_rule_without_keys_is_refused_naming_action_and_pointer() {
        let rule = RedactRule {
            pointer: "/card".into(),
            mode: RedactMode::Hash,
        };
        let err = Rules::from_actions([("pay".to_owned(), vec![rule])], None).expect_err("no keys");
        assert_eq!(
            (err.action.as_str(), err.pointer.as_str()),
            ("pay", "/card")
        );
    }

    fn dropping_cvc(keys: Option<RedactionKeys>) -> Result<Rules, MissingRedactionKey> {
        let rule = RedactRule {
            pointer: "/card/cvc".into(),
            mode: RedactMode::Drop,
        };
        Rules::from_actions([("pay".to_owned(), vec![rule])], keys)
    }

    #[test]
    fn a_dropped_field_is_outside_the_journal_but_inside_conflict_detection() {
        let rules = dropping_cvc(Some(RedactionKeys::new(key("a"), []))).expect("keys given");
        let first = json!({"card": {"cvc": "123", "last4": "4242"}, "amount": 1});
        let other = json!({"card": {"cvc": "999", "last4": "4242"}, "amount": 1});
        let (a, b) = (
            rules.recorded("pay", &first).expect("pay"),
            rules.recorded("pay", &other).expect("pay"),
        );
        assert_eq!(a.payload, json!({"card": {"last4": "4242"}, "amount": 1}));
        assert_eq!(a.payload, b.payload, "the journal keeps neither value");
        assert!(!a.payload.to_string().contains("123"));
        assert_ne!(a.request_hash, b.request_hash);
        assert!(
            !rules.is_replay("pay", &other, &b.request_hash, &a.request_hash, &a.payload),
            "another value in a dropped field is a conflict"
        );
        assert!(rules.is_replay("pay", &first, &a.request_hash, &a.request_hash, &a.payload));
        // Keyed: the digest depends on the secret, so the stored hash confirms no guess.
        let other_key = dropping_cvc(Some(RedactionKeys::new(key("b"), []))).expect("keys");
        assert_ne!(
            other_key.recorded("pay", &first).expect("pay").request_hash,
            a.request_hash
        );
        // After a rotation, an intent digested under the older key still replays, and only
        // with its own value.
        let rotated =
            dropping_cvc(Some(RedactionKeys::new(key("b"), [key("a")]))).expect("keys given");
        let again = rotated.recorded("pay", &first).expect("pay");
        assert!(rotated.is_replay(
            "pay",
            &first,
            &again.request_hash,
            &a.request_hash,
            &a.payload
        ));
        let changed = rotated.recorded("pay", &other).expect("pay");
        assert!(!rotated.is_replay(
            "pay",
            &other,
            &changed.request_hash,
            &a.request_hash,
            &a.payload
        ));
        // An intent recorded before dropped values entered the hash replays as it did.
        let before = request_hash("pay", &a.payload);
        assert!(rules.is_replay("pay", &first, &a.request_hash, &before, &a.payload));
    }

    #[test]
    fn a_dropping_rule_without_keys_is_refused_naming_it() {
        let err = dropping_cvc(None).expect_err("no keys");
        assert_eq!(
            (err.action.as_str(), err.pointer.as_str(), err.mode),
            ("pay", "/card/cvc", "drop")
        );
        assert!(err.to_string().contains(RedactionKeys::ENV), "{err}");
    }

    #[test]
    fn prepare_checks_the_intent_then_the_action() {
        let rules = hashing_card(Some(RedactionKeys::new(key("a"), [])));
        let bad_key = NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: "has space",
                action: "pay",
            },
            json!({}),
        );
        assert_eq!(
            rules.prepare(&bad_key).expect_err("bad key").field,
            "idempotency_key"
        );
        let unknown = NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: "k",
                action: "refund",
            },
            json!({}),
        );
        let err = rules.prepare(&unknown).expect_err("unknown action");
        assert_eq!(err.field, "action");
        assert!(err.reason.contains("configured: pay"), "{}", err.reason);
        let ok = rules
            .prepare(&NewIntent::new(
                IntentNames {
                    tenant_id: "t",
                    idempotency_key: "k",
                    action: "pay",
                },
                json!({"card": "4111"}),
            ))
            .expect("valid");
        assert!(ok.redacted);
        assert_ne!(ok.payload["card"], json!("4111"));
    }

    #[test]
    fn prepare_enforces_the_actions_schema_naming_the_field() {
        let config = Config::from_toml(
            r#"
[actions.pay]
destination = "d"
[actions.pay.arguments_schema]
type = "object"
required = ["amount"]
properties.amount = { type = "string" }

[destinations.d]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "key"
"#,
        )
        .expect("valid config");
        let rules = Rules::new(&config, None).expect("nothing hashes");
        let wrong = NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: "k",
                action: "pay",
            },
            json!({"amount": 5}),
        );
        assert_eq!(
            rules.prepare(&wrong).expect_err("type").field,
            "arguments/amount"
        );
        let missing = NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: "k",
                action: "pay",
            },
            json!({}),
        );
        assert_eq!(
            rules.prepare(&missing).expect_err("required").field,
            "arguments"
        );
        let right = NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: "k",
                action: "pay",
            },
            json!({"amount": "5.00"}),
        );
        assert!(rules.prepare(&right).is_ok());
        assert!(rules.schema("pay").is_some());
    }

    #[test]
    fn a_replay_is_recognised_across_a_key_rotation_and_a_changed_request_is_not() {
        let before = hashing_card(Some(RedactionKeys::new(key("a"), [])));
        let args = json!({"card": "4111", "amount": 5});
        let recorded = before.recorded("pay", &args).expect("configured");

        let after = hashing_card(Some(RedactionKeys::new(key("b"), [key("a")])));
        let now = after.recorded("pay", &args).expect("configured");
        assert_ne!(
            now.request_hash, recorded.request_hash,
            "hashed with the new key"
        );
        assert!(after.is_replay(
            "pay",
            &args,
            &now.request_hash,
            &recorded.request_hash,
            &recorded.payload
        ));

        let other = json!({"card": "4111", "amount": 6});
        let other_hash = after
            .recorded("pay", &other)
            .expect("configured")
            .request_hash;
        assert!(!after.is_replay(
            "pay",
            &other,
            &other_hash,
            &recorded.request_hash,
            &recorded.payload
        ));
    }
}
