//! The transactional submit (docs/architecture.md, "Submit"): validate → redact → hash → insert
//! journal row and outbox row in the caller's transaction → on a key that exists, replay or
//! conflict.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::DurationRound;
use chrono::{DateTime, Utc};
use oncebox_core::config::Config;
use oncebox_core::intent::InvalidIntent;
use oncebox_core::redact::{self, HashWith, KeyUsed, RedactRule, RedactionKeys};
use oncebox_core::{NewIntent, Status, request_hash};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, Postgres, Transaction};

use crate::error::{StoreError, SubmitError};
use crate::intent::{Intent, intent_by_key};

/// What a submit returns: the intent that owns the key, and whether this call created it.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The journal row (new, or the existing one on replay).
    pub intent: Intent,
    /// True when this call inserted it; false on a replay of the same request.
    pub created: bool,
}

/// The columns submit.sql returns for a new row; the rest the caller already has.
#[derive(sqlx::FromRow)]
struct Inserted {
    id: i64,
    created_at: DateTime<Utc>,
}

/// An intent as the journal records it ([`Intake::recorded`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The arguments after redaction.
    pub payload: Value,
    /// Whether redaction changed them.
    pub redacted: bool,
    /// The request hash over the action and the redacted arguments.
    pub request_hash: String,
}

/// An action redacts a field by `hash` and no redaction key was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "action {action:?} redacts {pointer} by hash, which needs a secret key: set {} to \
     `id:secret` (at least {} bytes of secret; see docs/security.md)",
    RedactionKeys::ENV,
    redact::MIN_SECRET_BYTES
)]
pub struct MissingRedactionKey {
    /// The action whose rule hashes.
    pub action: String,
    /// The rule's pointer.
    pub pointer: String,
}

/// Accepts intents for the configured actions.
///
/// Cheap to share: build one at start-up and call [`Intake::submit`] from every request.
#[derive(Debug, Clone)]
pub struct Intake {
    actions: BTreeMap<String, Vec<RedactRule>>,
    keys: Option<Arc<RedactionKeys>>,
    notify: bool,
}

impl Intake {
    /// An intake for the actions of `config`, with their redaction rules, hashing with `keys`
    /// (usually [`RedactionKeys::from_env`]).
    ///
    /// # Errors
    /// [`MissingRedactionKey`] when a rule hashes and `keys` is `None`: refuse to start.
    pub fn new(config: &Config, keys: Option<RedactionKeys>) -> Result<Self, MissingRedactionKey> {
        Self::from_actions(
            config
                .actions
                .iter()
                .map(|(name, a)| (name.clone(), a.redact.clone())),
            keys,
        )
    }

    /// An intake for the given actions and redaction rules, hashing with `keys`.
    ///
    /// # Errors
    /// As [`Intake::new`].
    pub fn from_actions(
        actions: impl IntoIterator<Item = (String, Vec<RedactRule>)>,
        keys: Option<RedactionKeys>,
    ) -> Result<Self, MissingRedactionKey> {
        let actions: BTreeMap<String, Vec<RedactRule>> = actions.into_iter().collect();
        if keys.is_none() {
            let hashing = actions.iter().find_map(|(action, rules)| {
                rules
                    .iter()
                    .find(|r| r.mode == redact::RedactMode::Hash)
                    .map(|r| (action, r))
            });
            if let Some((action, rule)) = hashing {
                return Err(MissingRedactionKey {
                    action: action.clone(),
                    pointer: rule.pointer.clone(),
                });
            }
        }
        Ok(Intake {
            actions,
            keys: keys.map(Arc::new),
            notify: true,
        })
    }

    /// The redaction rules of `action`.
    fn rules(&self, action: &str) -> Result<&[RedactRule], InvalidIntent> {
        self.actions.get(action).map(Vec::as_slice).ok_or_else(|| {
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

    /// What an intent of `action` with `arguments` is recorded as: the arguments redacted by the
    /// action's rules (keyed with the current key) and the request hash over them — exactly what
    /// [`Intake::submit`] stores and compares, and what `oncebox hash --config` prints.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming `action` when it is not configured.
    pub fn recorded(&self, action: &str, arguments: &Value) -> Result<Recorded, InvalidIntent> {
        let mut payload = arguments.clone();
        let redacted = redact::apply(&mut payload, self.rules(action)?, self.hash_with());
        let request_hash = request_hash(action, &payload);
        Ok(Recorded {
            payload,
            redacted,
            request_hash,
        })
    }

    /// How `rules` hash new intents: with the current key (there is one whenever a rule
    /// hashes: the constructors check).
    fn hash_with(&self) -> HashWith<'_> {
        self.keys
            .as_deref()
            .map_or(HashWith::LegacySha256, |k| HashWith::Key(k.current()))
    }

    /// The request hash of `arguments` redacted the way the journal's `payload` was, when that
    /// was with a key other than the current one (rotated since) or before keys: a replay of an
    /// intent recorded then must still be recognised. `None` when there is nothing else to try.
    fn hash_as_recorded(
        &self,
        action: &str,
        arguments: &Value,
        rules: &[RedactRule],
        payload: &Value,
    ) -> Option<String> {
        let with = match redact::key_used(payload, rules)? {
            KeyUsed::LegacySha256 => HashWith::LegacySha256,
            KeyUsed::Key(id) => {
                let keys = self.keys.as_deref()?;
                if id == keys.current().id() {
                    return None;
                }
                HashWith::Key(keys.get(&id)?)
            }
        };
        let mut redacted = arguments.clone();
        redact::apply(&mut redacted, rules, with);
        Some(request_hash(action, &redacted))
    }

    /// The names of the actions this intake accepts, in order.
    pub fn actions(&self) -> impl Iterator<Item = &str> {
        self.actions.keys().map(String::as_str)
    }

    /// Whether submits may NOTIFY waiting workers (default true). They do so only while a worker
    /// is registered as waiting ([`crate::register_waiting`]): NOTIFY serialises notifying
    /// commits cluster-wide, and a busy pool polls anyway. Without it workers find new rows by
    /// polling only.
    pub fn with_notify(mut self, notify: bool) -> Self {
        self.notify = notify;
        self
    }

    /// Records `intent` in the journal and the outbox inside the caller's transaction `tx`.
    ///
    /// Nothing is visible to workers until the caller commits, and nothing remains if it rolls
    /// back. The same key with the same request returns the existing intent (`created = false`);
    /// the same key with another request is a [`SubmitError::KeyConflict`] and writes nothing.
    /// Concurrent submits of one key wait for each other on the journal's unique index, so
    /// exactly one creates the intent.
    ///
    /// The request hash is computed over the arguments *after* redaction: a dropped field is not
    /// part of the intent's identity; a hashed field is, by its hash. When redaction changed the
    /// arguments, the original ones are kept on the outbox row (deleted when the work is done)
    /// so that the destination still receives them; the journal keeps only the redacted form.
    ///
    /// # Errors
    /// - [`SubmitError::Invalid`] naming the field (bad key, non-object arguments, unknown action…);
    /// - [`SubmitError::KeyConflict`] with both hashes;
    /// - [`SubmitError::Store`] when the database fails: roll back, and retry if you wish. Under
    ///   `REPEATABLE READ` or `SERIALIZABLE` a concurrent submit of the same key surfaces here as a
    ///   serialization failure.
    #[tracing::instrument(
        skip_all,
        fields(tenant = %intent.tenant_id, key = %intent.idempotency_key, action = %intent.action, intent_id),
        err(level = "info")
    )]
    pub async fn submit(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        intent: NewIntent,
    ) -> Result<Submitted, SubmitError> {
        self.submit_on(tx, intent).await
    }

    /// Records `intent` on its own: one statement, committed by itself (autocommit). For
    /// callers with nothing of their own to write in the same transaction — the HTTP API — it
    /// saves the `BEGIN` and `COMMIT` round trips; everything else is as [`Intake::submit`].
    ///
    /// # Errors
    /// As [`Intake::submit`]; on [`SubmitError::Store`] the intent may or may not have been
    /// committed: submit again with the same key to find out.
    pub async fn submit_alone(
        &self,
        conn: &mut PgConnection,
        intent: NewIntent,
    ) -> Result<Submitted, SubmitError> {
        self.submit_on(conn, intent).await
    }

    async fn submit_on(
        &self,
        conn: &mut PgConnection,
        intent: NewIntent,
    ) -> Result<Submitted, SubmitError> {
        intent.validate()?;
        let rules = self.rules(&intent.action)?;
        let Recorded {
            payload,
            redacted,
            request_hash: hash,
        } = self.recorded(&intent.action, &intent.arguments)?;
        let delivery_arguments: Option<Json<&Value>> = redacted.then_some(Json(&intent.arguments));
        // Postgres keeps microseconds: truncate here so the stored deadline is the one returned.
        let deadline: Option<DateTime<Utc>> = intent
            .deadline
            .map(DateTime::<Utc>::from)
            .and_then(|d| d.duration_trunc(chrono::TimeDelta::microseconds(1)).ok());

        let inserted: Option<Inserted> = sqlx::query_as(crate::sql::SUBMIT)
            .bind(&intent.tenant_id)
            .bind(&intent.idempotency_key)
            .bind(&intent.action)
            .bind(&hash)
            .bind(Json(&payload))
            .bind(&intent.business_ref)
            .bind(&intent.run_id)
            .bind(&intent.step)
            .bind(deadline)
            .bind(delivery_arguments)
            .bind(self.notify)
            .bind(crate::OUTBOX_CHANNEL)
            .fetch_optional(&mut *conn)
            .await?;
        if let Some(row) = inserted {
            tracing::Span::current().record("intent_id", row.id);
            let intent = Intent {
                id: row.id,
                tenant_id: intent.tenant_id,
                idempotency_key: intent.idempotency_key,
                action: intent.action,
                request_hash: hash,
                payload,
                status: Status::Pending,
                attempt_count: 0,
                external_reference: None,
                response: None,
                last_error: None,
                run_id: intent.run_id,
                business_ref: intent.business_ref,
                step: intent.step,
                deadline,
                created_at: row.created_at,
                updated_at: row.created_at,
                completed_at: None,
            };
            return Ok(Submitted {
                intent,
                created: true,
            });
        }

        let existing = intent_by_key(&mut *conn, &intent.tenant_id, &intent.idempotency_key)
            .await?
            .ok_or_else(|| {
                StoreError::Database(sqlx::Error::Protocol(
                    "the key's row conflicted on insert but is not visible to this transaction"
                        .into(),
                ))
            })?;
        tracing::Span::current().record("intent_id", existing.id);
        if existing.request_hash != hash
            && self.hash_as_recorded(&intent.action, &intent.arguments, rules, &existing.payload)
                != Some(existing.request_hash.clone())
        {
            return Err(SubmitError::KeyConflict {
                idempotency_key: intent.idempotency_key,
                existing_id: existing.id,
                existing_hash: existing.request_hash,
                submitted_hash: hash,
            });
        }
        Ok(Submitted {
            intent: existing,
            created: false,
        })
    }
}
