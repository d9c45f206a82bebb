//! The transactional submit (docs/architecture.md, "Submit"): validate → redact → hash → insert
//! journal row and outbox row in the caller's transaction → on a key that exists, replay or
//! conflict.

use chrono::DurationRound;
use chrono::{DateTime, Utc};
use oncebox_core::config::Config;
use oncebox_core::intake::Rules;
pub use oncebox_core::intake::{MissingRedactionKey, Recorded};
use oncebox_core::intent::InvalidIntent;
use oncebox_core::redact::{RedactRule, RedactionKeys};
use oncebox_core::{NewIntent, Status};
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

/// Accepts intents for the configured actions: the rules of [`oncebox_core::intake::Rules`]
/// (shared with the Python binding), written with [`crate::sql::SUBMIT`].
///
/// Cheap to share: build one at start-up and call [`Intake::submit`] from every request.
#[derive(Debug, Clone)]
pub struct Intake {
    rules: Rules,
    notify: bool,
}

impl Intake {
    /// An intake for the actions of `config`, with their redaction rules, hashing with `keys`
    /// (usually [`RedactionKeys::from_env`]).
    ///
    /// # Errors
    /// [`MissingRedactionKey`] when a rule hashes and `keys` is `None`: refuse to start.
    pub fn new(config: &Config, keys: Option<RedactionKeys>) -> Result<Self, MissingRedactionKey> {
        Ok(Self::with_rules(Rules::new(config, keys)?))
    }

    /// An intake for the given actions and redaction rules, hashing with `keys`.
    ///
    /// # Errors
    /// As [`Intake::new`].
    pub fn from_actions(
        actions: impl IntoIterator<Item = (String, Vec<RedactRule>)>,
        keys: Option<RedactionKeys>,
    ) -> Result<Self, MissingRedactionKey> {
        Ok(Self::with_rules(Rules::from_actions(actions, keys)?))
    }

    /// An intake applying `rules`.
    pub fn with_rules(rules: Rules) -> Self {
        Intake {
            rules,
            notify: true,
        }
    }

    /// What an intent of `action` with `arguments` is recorded as ([`Rules::recorded`]): what
    /// [`Intake::submit`] stores and compares, and what `oncebox hash --config` prints.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming `action` when it is not configured.
    pub fn recorded(&self, action: &str, arguments: &Value) -> Result<Recorded, InvalidIntent> {
        self.rules.recorded(action, arguments)
    }

    /// The names of the actions this intake accepts, in order.
    pub fn actions(&self) -> impl Iterator<Item = &str> {
        self.rules.actions()
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
        let Recorded {
            payload,
            redacted,
            request_hash: hash,
        } = self.rules.prepare(&intent)?;
        // Postgres keeps microseconds: truncate here so the stored deadline is the one returned.
        let deadline: Option<DateTime<Utc>> = intent
            .deadline
            .map(DateTime::<Utc>::from)
            .and_then(|d| d.duration_trunc(chrono::TimeDelta::microseconds(1)).ok());

        let inserted = self
            .insert(conn, &intent, &hash, &payload, redacted, deadline)
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
                ordering_key: intent.ordering_key,
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
        if !self.rules.is_replay(
            &intent.action,
            &intent.arguments,
            &hash,
            &existing.request_hash,
            &existing.payload,
        ) {
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

    /// Runs the submit statement — the ordered one when the intent has an ordering key — and
    /// returns the new row, or `None` when the key already existed.
    async fn insert(
        &self,
        conn: &mut PgConnection,
        intent: &NewIntent,
        hash: &str,
        payload: &Value,
        redacted: bool,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Option<Inserted>, SubmitError> {
        let delivery_arguments: Option<Json<&Value>> = redacted.then_some(Json(&intent.arguments));
        let inserted = match &intent.ordering_key {
            None => {
                sqlx::query_as(crate::sql::SUBMIT)
                    .bind(&intent.tenant_id)
                    .bind(&intent.idempotency_key)
                    .bind(&intent.action)
                    .bind(hash)
                    .bind(Json(payload))
                    .bind(&intent.business_ref)
                    .bind(&intent.run_id)
                    .bind(&intent.step)
                    .bind(deadline)
                    .bind(delivery_arguments)
                    .bind(self.notify)
                    .bind(crate::OUTBOX_CHANNEL)
                    .fetch_optional(&mut *conn)
                    .await?
            }
            Some(ordering_key) => {
                let lane = self.rules.lane(&intent.action)?;
                sqlx::query_as(crate::sql::SUBMIT_ORDERED)
                    .bind(&intent.tenant_id)
                    .bind(ordering_key)
                    .bind(&lane.destination)
                    .bind(lane.skip_failed)
                    .bind(&intent.idempotency_key)
                    .bind(&intent.action)
                    .bind(hash)
                    .bind(Json(payload))
                    .bind(&intent.business_ref)
                    .bind(&intent.run_id)
                    .bind(&intent.step)
                    .bind(deadline)
                    .bind(delivery_arguments)
                    .bind(self.notify)
                    .bind(crate::OUTBOX_CHANNEL)
                    .fetch_optional(&mut *conn)
                    .await?
            }
        };
        Ok(inserted)
    }
}
