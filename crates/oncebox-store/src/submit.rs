//! The transactional submit (docs/architecture.md, "Submit"): validate → redact → hash → insert
//! journal row and outbox row in the caller's transaction → on a key that exists, replay or
//! conflict.

use chrono::DurationRound;
use chrono::{DateTime, Utc};
use oncebox_core::config::Config;
use oncebox_core::intake::{ApprovalNeeded, Rules};
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
    status: Status,
    key_form: oncebox_core::KeyForm,
    submitted_by: Option<String>,
}

impl Inserted {
    /// The journal row this insert made of `intent`.
    fn intent(
        self,
        intent: NewIntent,
        request_hash: String,
        payload: Value,
        deadline: Option<DateTime<Utc>>,
    ) -> Intent {
        Intent {
            id: self.id,
            tenant_id: intent.tenant_id,
            idempotency_key: intent.idempotency_key,
            key_form: self.key_form,
            action: intent.action,
            request_hash,
            payload,
            status: self.status,
            attempt_count: 0,
            external_reference: None,
            response: None,
            last_error: None,
            run_id: intent.run_id,
            business_ref: intent.business_ref,
            step: intent.step,
            ordering_key: intent.ordering_key,
            deadline,
            created_at: self.created_at,
            updated_at: self.created_at,
            completed_at: None,
            submitted_by: self.submitted_by,
        }
    }
}

/// Accepts intents for the configured actions: the rules of [`oncebox_core::intake::Rules`]
/// (shared with the Python binding), written with [`crate::sql::SUBMIT`].
///
/// Cheap to share: build one at start-up and call [`Intake::submit`] from every request.
#[derive(Debug, Clone)]
pub struct Intake {
    rules: Rules,
    notify: bool,
    principal: Option<String>,
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
            principal: None,
        }
    }

    /// Records `principal` (`oncebox_core::Principal`, usually [`Principal::named`]) as the
    /// submitter of every intent this intake writes, unless a submit names another
    /// ([`Intake::submit_as`]). Without one, an intent's submitter is the database role the
    /// submit ran under (`db:ROLE`). The submitter may not approve the intent.
    ///
    /// [`Principal::named`]: oncebox_core::Principal::named
    pub fn with_principal(mut self, principal: &oncebox_core::Principal) -> Self {
        self.principal = Some(principal.to_string());
        self
    }

    /// The principal this intake records as submitter, if it names one.
    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// What an intent of `action` with `arguments` is recorded as ([`Rules::recorded`]): what
    /// [`Intake::submit`] stores and compares, and what `oncebox hash --config` prints.
    ///
    /// # Errors
    /// [`InvalidIntent`] naming `action` when it is not configured.
    pub fn recorded(&self, action: &str, arguments: &Value) -> Result<Recorded, InvalidIntent> {
        self.rules.recorded(action, arguments)
    }

    /// The fields of `action`'s intents its approvers see as they will be delivered
    /// ([`Rules::approver_fields`]).
    pub fn approver_fields(&self, action: &str) -> Vec<String> {
        self.rules.approver_fields(action)
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
        self.submit_on(tx, intent, None).await
    }

    /// As [`Intake::submit`], recording `submitter` as the principal who submits it (instead of
    /// the intake's own, [`Intake::with_principal`]): that principal may not approve it.
    ///
    /// # Errors
    /// As [`Intake::submit`].
    pub async fn submit_as(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        intent: NewIntent,
        submitter: &oncebox_core::Principal,
    ) -> Result<Submitted, SubmitError> {
        self.submit_on(tx, intent, Some(&submitter.to_string()))
            .await
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
        self.submit_on(conn, intent, None).await
    }

    /// As [`Intake::submit_alone`], for a caller that knows who submits: `submitter` (an API
    /// token's principal, as [`crate::tokens::Caller::principal`] names it) is kept with the
    /// intent and may not approve it ([`crate::approvals::approve`]).
    ///
    /// # Errors
    /// As [`Intake::submit_alone`].
    pub async fn submit_alone_as(
        &self,
        conn: &mut PgConnection,
        intent: NewIntent,
        submitter: &str,
    ) -> Result<Submitted, SubmitError> {
        self.submit_on(conn, intent, Some(submitter)).await
    }

    async fn submit_on(
        &self,
        conn: &mut PgConnection,
        intent: NewIntent,
        submitted_by: Option<&str>,
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

        let approval = self.rules.approval(&intent.action, &intent.arguments)?;
        let written = Written {
            hash: &hash,
            payload: &payload,
            redacted,
            deadline,
            approval,
            submitted_by: submitted_by.or(self.principal.as_deref()),
        };
        let inserted = self.insert(conn, &intent, &written).await?;
        if let Some(row) = inserted {
            tracing::Span::current().record("intent_id", row.id);
            return Ok(Submitted {
                intent: row.intent(intent, hash, payload, deadline),
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
        w: &Written<'_>,
    ) -> Result<Option<Inserted>, SubmitError> {
        let (hash, payload, deadline) = (w.hash, Json(w.payload), w.deadline);
        let delivery_arguments: Option<Json<&Value>> =
            w.redacted.then_some(Json(&intent.arguments));
        // Postgres has no unsigned types; a policy asks for at most a few people.
        let approvals: Option<i16> = w
            .approval
            .map(|a| i16::try_from(a.approvals.get()).unwrap_or(i16::MAX));
        let window: Option<f64> = w.approval.map(|a| a.window.as_secs_f64());
        let inserted = match &intent.ordering_key {
            None => {
                sqlx::query_as(crate::sql::SUBMIT)
                    .bind(&intent.tenant_id)
                    .bind(&intent.idempotency_key)
                    .bind(&intent.action)
                    .bind(hash)
                    .bind(payload)
                    .bind(&intent.business_ref)
                    .bind(&intent.run_id)
                    .bind(&intent.step)
                    .bind(deadline)
                    .bind(delivery_arguments)
                    .bind(approvals)
                    .bind(window)
                    .bind(w.submitted_by)
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
                    .bind(payload)
                    .bind(&intent.business_ref)
                    .bind(&intent.run_id)
                    .bind(&intent.step)
                    .bind(deadline)
                    .bind(delivery_arguments)
                    .bind(approvals)
                    .bind(window)
                    .bind(w.submitted_by)
                    .bind(self.notify)
                    .bind(crate::OUTBOX_CHANNEL)
                    .fetch_optional(&mut *conn)
                    .await?
            }
        };
        Ok(inserted)
    }
}

/// What a submit writes besides the caller's intent.
struct Written<'a> {
    /// The request hash.
    hash: &'a str,
    /// The arguments as the journal keeps them (redacted).
    payload: &'a Value,
    /// Whether redaction changed them.
    redacted: bool,
    /// The deadline, to the microsecond.
    deadline: Option<DateTime<Utc>>,
    /// What the action's approval policy asks of it.
    approval: Option<ApprovalNeeded>,
    /// The principal who submits it; `None`: the database role (`db:ROLE`). That principal may
    /// not approve it.
    submitted_by: Option<&'a str>,
}
