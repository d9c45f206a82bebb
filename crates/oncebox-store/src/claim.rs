//! Claiming outbox work: one statement leases a batch (SKIP LOCKED), bumps each row's fencing
//! epoch and commits at once — no transaction is held while the work is done.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use oncebox_core::{AttemptError, KeyForm, Status};
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::{FromRow, PgExecutor, Row};

use crate::lease::{Lease, Phase};

/// An outbox row leased to the caller, with what the worker needs of its intent.
#[derive(Debug, Clone, PartialEq, FromRow)]
pub struct ClaimedRow {
    /// The row's intent and the epoch of this lease: every write must be fenced on it.
    #[sqlx(flatten)]
    pub lease: Lease,
    /// The kind of work.
    pub phase: Phase,
    /// Attempts already made, for the life of the intent (numbers only grow).
    pub attempt: i32,
    /// The attempt count when an operator last retried the intent: the retry policy's budget
    /// counts attempts after it (0 until a retry).
    pub budget_from: i32,
    /// Set when an earlier attempt may have reached the destination.
    pub dispatched_at: Option<DateTime<Utc>>,
    /// The unredacted arguments, when they differ from the journal's payload.
    pub arguments: Option<Json<Value>>,
    /// When this lease ends unless renewed.
    pub lease_expires_at: DateTime<Utc>,
    /// True when the row was taken from a worker whose lease expired.
    pub lease_taken_over: bool,
    /// The intent's tenant.
    pub tenant_id: String,
    /// The intent's key.
    pub idempotency_key: String,
    /// How the intent's delivery key is formed (fixed when it was written).
    pub key_form: KeyForm,
    /// The intent's action.
    pub action: String,
    /// The intent's request hash.
    pub request_hash: String,
    /// The redacted arguments (deliver `arguments` instead when present).
    pub payload: Json<Value>,
    /// The intent's status at claim time.
    pub status: Status,
    /// The receiver's reference, when one is known.
    pub external_reference: Option<String>,
    /// The intent's last error.
    pub last_error: Option<Json<AttemptError>>,
    /// The intent's attempts so far.
    pub attempt_count: i32,
    /// When the intent was accepted.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// The intent's deadline.
    pub deadline: Option<DateTime<Utc>>,
    /// True when the deadline has passed (by the database's clock).
    pub deadline_passed: bool,
    /// Seconds left in the approval window of an intent with an approval policy, by the
    /// database's clock (zero or less: closed).
    pub approval_secs_left: Option<f64>,
}

impl ClaimedRow {
    /// The arguments to deliver: the unredacted copy when redaction changed them.
    pub fn delivery_arguments(&self) -> &Value {
        self.arguments.as_ref().map_or(&self.payload.0, |a| &a.0)
    }

    /// The intent this row works on.
    pub fn intent_id(&self) -> i64 {
        self.lease.intent_id
    }

    /// What every destination sees as the intent's identity: unique across tenants, the same
    /// for every attempt ([`oncebox_core::delivery_key`]).
    pub fn delivery_key(&self) -> String {
        self.key_form
            .delivery_key(&self.tenant_id, &self.idempotency_key)
    }
}

/// Where a claimer's next claim starts among the tenants with work: after the last tenant its
/// previous claim visited. Each claiming loop keeps one, so that its claims go round every
/// tenant with ready work, a bounded number at a time (`claim.sql`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantCursor(String);

impl TenantCursor {
    /// The last tenant the previous claim visited (empty before the first claim).
    pub fn tenant(&self) -> &str {
        &self.0
    }
}

/// Leases up to `limit` rows of `phase` to `worker` for `lease`, in one auto-committed
/// statement: rows whose lease expired first, then the oldest ready rows of up to `limit`
/// tenants with ready work, the first ones after `cursor`, shared equally between them. The
/// cursor moves on to the last tenant the claim visited.
///
/// A row that is claimed but cannot be read (a value this binary does not know, written by a
/// newer one) is logged as an error with its intent and left to its lease; the others are
/// returned. Nothing is ever read as a default in its place.
///
/// # Errors
/// The database's error.
#[tracing::instrument(skip(db, cursor), fields(phase = phase.as_str()), err)]
pub async fn claim(
    db: impl PgExecutor<'_>,
    phase: Phase,
    worker: &str,
    limit: i64,
    lease: Duration,
    cursor: &mut TenantCursor,
) -> Result<Vec<ClaimedRow>, sqlx::Error> {
    let rows: Vec<PgRow> = sqlx::query(crate::sql::CLAIM)
        .bind(phase)
        .bind(worker)
        .bind(limit)
        .bind(lease.as_secs_f64())
        .bind(cursor.tenant())
        .fetch_all(db)
        .await?;
    if let Some(Ok(Some(last))) = rows
        .first()
        .map(|r| r.try_get::<Option<String>, _>("claim_cursor"))
    {
        cursor.0 = last;
    }
    Ok(rows.iter().filter_map(decode_claimed).collect())
}

/// Whether `phase` has rows a [`claim`] of it could take, now or later: an unleased row, ready
/// or not yet, or one whose lease expired. When it says no, no claim of the phase could have
/// taken anything. A loop whose claims found nothing asks this before claiming again: it plans
/// in about 0.05 ms, where the claim, planned for every call on the pool, takes 1–1.5 ms.
///
/// # Errors
/// The database's error.
pub async fn phase_waiting(db: impl PgExecutor<'_>, phase: Phase) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(crate::sql::PHASE_WAITING)
        .bind(phase)
        .fetch_one(db)
        .await
}

/// How long a claim session keeps the plan it cached: the next claim after that plans again.
/// A cached plan is made for the tables as they were: made while the outbox was empty (a worker
/// started on a quiet or new database), it read the whole outbox and sorted it on every claim
/// once work arrived (measured: 224 ms per claim over 200,000 ready rows, against 1.6 ms for a
/// plan made then), until an ANALYZE of the outbox happened to invalidate it. Planning again
/// takes about a millisecond, once per interval.
pub const REPLAN_AFTER: Duration = Duration::from_secs(1);

/// A claimer's own connection, taken out of a pool (the pool opens another in its place) and set
/// up by `claim_session.sql`: claims use a cached plan, made again once it is [`REPLAN_AFTER`]
/// old, and commit without waiting for the WAL flush — safe for claims alone, as that
/// statement's header explains. Only claims run on it.
pub struct ClaimSession {
    conn: sqlx::PgConnection,
    planned_at: Instant,
    replan_after: Duration,
}

impl ClaimSession {
    /// Opens a session on a connection taken out of `pool`.
    ///
    /// # Errors
    /// The database's error.
    pub async fn open(pool: &sqlx::PgPool) -> Result<ClaimSession, sqlx::Error> {
        let conn = crate::session_connection(pool, crate::sql::CLAIM_SESSION).await?;
        Ok(ClaimSession {
            conn,
            planned_at: Instant::now(),
            replan_after: REPLAN_AFTER,
        })
    }

    /// The same session, planning again once its plan is `age` old instead of
    /// [`REPLAN_AFTER`].
    #[must_use]
    pub fn replan_after(self, age: Duration) -> ClaimSession {
        ClaimSession {
            replan_after: age,
            ..self
        }
    }

    /// [`claim`] on this session, planning it again first when its plan is [`REPLAN_AFTER`]
    /// old (or the age given to [`ClaimSession::replan_after`]).
    ///
    /// # Errors
    /// The database's error.
    pub async fn claim(
        &mut self,
        phase: Phase,
        worker: &str,
        limit: i64,
        lease: Duration,
        cursor: &mut TenantCursor,
    ) -> Result<Vec<ClaimedRow>, sqlx::Error> {
        if self.planned_at.elapsed() >= self.replan_after {
            self.replan().await?;
        }
        claim(&mut self.conn, phase, worker, limit, lease, cursor).await
    }

    /// Between claims, when nothing was ready: once the plan is half [`REPLAN_AFTER`] old (or
    /// half the age given to [`ClaimSession::replan_after`]), plans the claim again now, by
    /// running a claim of no rows, so that the claim that finds work does not wait for the
    /// planning (a millisecond, on the path of one delivery in a hundred at 100/s).
    ///
    /// # Errors
    /// The database's error.
    pub async fn replan_if_old(
        &mut self,
        phase: Phase,
        worker: &str,
        lease: Duration,
    ) -> Result<(), sqlx::Error> {
        if self.planned_at.elapsed() < self.replan_after / 2 {
            return Ok(());
        }
        self.replan().await?;
        let none = claim(
            &mut self.conn,
            phase,
            worker,
            0,
            lease,
            &mut TenantCursor::default(),
        )
        .await?;
        debug_assert!(none.is_empty(), "a claim of no rows claimed some");
        Ok(())
    }

    /// Forgets the cached plan: the next claim is planned for the tables as they are then.
    async fn replan(&mut self) -> Result<(), sqlx::Error> {
        use sqlx::Connection;
        self.conn.clear_cached_statements().await?;
        self.planned_at = Instant::now();
        Ok(())
    }

    /// The session's connection, for statements that must share it (a test's or a
    /// benchmark's transaction around claims).
    pub fn connection(&mut self) -> &mut sqlx::PgConnection {
        &mut self.conn
    }
}

fn decode_claimed(row: &PgRow) -> Option<ClaimedRow> {
    match ClaimedRow::from_row(row) {
        Ok(claimed) => Some(claimed),
        Err(error) => {
            let intent_id: Option<i64> = row.try_get("intent_id").ok();
            tracing::error!(
                ?intent_id,
                %error,
                "a claimed outbox row cannot be read: left to its lease, not worked on"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use oncebox_core::{IntentNames, NewIntent};
    use serde_json::json;
    use sqlx::PgPool;

    use super::{TenantCursor, claim, phase_waiting};
    use crate::{Intake, Phase};

    /// What a claim of `phase` by `worker` takes now.
    async fn claimed(pool: &PgPool, phase: Phase, worker: &str) -> usize {
        let rows = claim(
            pool,
            phase,
            worker,
            10,
            Duration::from_secs(30),
            &mut TenantCursor::default(),
        )
        .await
        .expect("claim");
        rows.len()
    }

    /// Whether `phase` has rows waiting, asserting that a "no" is never contradicted by a claim.
    async fn waiting(pool: &PgPool, phase: Phase) -> bool {
        let waiting = phase_waiting(pool, phase).await.expect("phase_waiting");
        if !waiting {
            assert_eq!(claimed(pool, phase, "probe").await, 0, "{phase}: said none");
        }
        waiting
    }

    /// The outbox row's lease and availability, set by hand.
    async fn set(pool: &PgPool, sql: &'static str) {
        sqlx::query(sql).execute(pool).await.expect(sql);
    }

    #[sqlx::test(migrations = "../../migrations")]
    async fn a_phase_waits_for_unleased_and_expired_rows_only(pool: PgPool) {
        let (d, r) = (Phase::Deliver, Phase::Reconcile);
        assert!(!waiting(&pool, d).await, "an empty outbox");

        let intake = Intake::from_actions([("a".to_owned(), vec![])], None).expect("no hashes");
        let mut tx = pool.begin().await.expect("begin");
        intake
            .submit(
                &mut tx,
                NewIntent::new(
                    IntentNames {
                        tenant_id: "t",
                        idempotency_key: "k",
                        action: "a",
                    },
                    json!({}),
                ),
            )
            .await
            .expect("submit");
        tx.commit().await.expect("commit");
        assert!(waiting(&pool, d).await, "a ready row");
        assert!(!waiting(&pool, r).await, "another phase's row");

        assert_eq!(claimed(&pool, d, "w").await, 1);
        assert!(!waiting(&pool, d).await, "a row whose lease is live");

        set(
            &pool,
            "UPDATE oncebox.outbox SET lease_expires_at = now() - interval '1 second'",
        )
        .await;
        assert!(waiting(&pool, d).await, "a row whose lease expired");
        assert!(!waiting(&pool, r).await, "another phase's expired lease");

        set(
            &pool,
            "UPDATE oncebox.outbox SET lease_owner = NULL, lease_expires_at = NULL,
                    available_at = now() + interval '1 hour'",
        )
        .await;
        assert!(
            waiting(&pool, d).await,
            "a row ready later: claimed when it is"
        );
        assert_eq!(claimed(&pool, d, "w").await, 0, "not ready yet");
    }
}
