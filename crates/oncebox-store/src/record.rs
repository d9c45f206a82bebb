//! The worker's fenced writes after a claim: dispatch marks, outcomes, lease renewal and
//! release. Each is one statement over a batch; each writes only rows still leased to the
//! worker at the epoch it claimed, so a worker whose lease was taken over writes nothing.

use std::time::Duration;

use oncebox_core::{AttemptError, AttemptKind, ErrorCode, Status};
use serde_json::Value;
use sqlx::PgExecutor;
use sqlx::types::Json;

use crate::lease::{Lease, Phase, columns};

/// What happens to the outbox row after an outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// The work is finished: delete the row.
    Done,
    /// Try again after this delay (same key).
    Retry(Duration),
    /// Look the effect up (the row becomes a reconcile-phase row).
    Reconcile,
    /// Nothing happened at the destination after its consistency window: deliver again with
    /// the same key (the row returns to the deliver phase).
    Reissue,
}

impl Next {
    /// The instruction record.sql reads.
    fn as_str(self) -> &'static str {
        match self {
            Next::Done => "done",
            Next::Retry(_) => "retry",
            Next::Reconcile => "reconcile",
            Next::Reissue => "reissue",
        }
    }
}

/// One delivery's outcome, ready to be recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The row's intent and the epoch the worker claimed: the fence.
    pub lease: Lease,
    /// The phase of the leased row.
    pub phase: Phase,
    /// Attempts made so far, this one included.
    pub attempt: i32,
    /// The journal's new status.
    pub status: Status,
    /// The receiver's answer, on success.
    pub response: Option<Value>,
    /// The receiver's reference, on success.
    pub external_reference: Option<String>,
    /// The last error, if any (kept as it was when `None`).
    pub last_error: Option<AttemptError>,
    /// What becomes of the outbox row.
    pub next: Next,
    /// Whether to add a row to the retry report, and what it says.
    pub report: Option<Report>,
}

/// One row of the retry report (`oncebox.attempts`).
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// What the row records: an outcome class or a decision.
    pub kind: AttemptKind,
    /// The HTTP status, if any.
    pub status_code: Option<u16>,
    /// The error code, if any.
    pub error_code: Option<ErrorCode>,
    /// What happened and why the next step was allowed.
    pub detail: Option<String>,
    /// How long the attempt took.
    pub elapsed: Duration,
}

impl Completion {
    /// Whether this is a delivery that succeeded and leaves nothing more to do: the case
    /// `record_succeeded.sql` writes (what `record.sql` would write for it, and no more).
    fn plain_success(&self) -> bool {
        self.phase == Phase::Deliver
            && self.status == Status::Succeeded
            && self.next == Next::Done
            && self.last_error.is_none()
            && self
                .report
                .as_ref()
                .is_some_and(|r| r.kind == AttemptKind::Succeeded && r.error_code.is_none())
    }
}

/// Records a batch of completions in one statement (its own implicit transaction). Returns the
/// intents written; a completion missing from the answer belonged to a lease taken over and
/// changed nothing. A batch of plain successes, what a drain writes, takes a shorter statement
/// that plans in half the time; any other batch takes the general one.
///
/// # Errors
/// The database's error; nothing of the batch is written then.
#[tracing::instrument(skip(db, batch), fields(n = batch.len()), err)]
pub async fn record(
    db: impl PgExecutor<'_>,
    worker: &str,
    batch: &[Completion],
) -> Result<Vec<i64>, sqlx::Error> {
    match RecordSession::takes(batch) {
        true => record_succeeded(db, worker, batch).await,
        false => record_any(db, worker, batch).await,
    }
}

/// A connection of its own, out of the pool, on which batches of plain successes — what a drain
/// records — are written with one cached plan instead of a plan made for each batch
/// (`record_session.sql` says why that plan is safe to keep). Any other batch is written on the
/// pool, by [`record`].
#[derive(Debug)]
pub struct RecordSession {
    conn: sqlx::PgConnection,
}

impl RecordSession {
    /// Opens a session on a connection taken out of `pool`.
    ///
    /// # Errors
    /// The database's error.
    pub async fn open(pool: &sqlx::PgPool) -> Result<RecordSession, sqlx::Error> {
        let conn = crate::session_connection(pool, crate::sql::RECORD_SESSION).await?;
        Ok(RecordSession { conn })
    }

    /// Whether this session writes `batch`: it is all [plain successes](Completion::plain_success).
    pub fn takes(batch: &[Completion]) -> bool {
        batch.iter().all(Completion::plain_success)
    }

    /// [`record`] for a batch this session [takes](RecordSession::takes), with the same answer.
    ///
    /// # Errors
    /// The database's error; nothing of the batch is written then. A batch the session does not
    /// take is refused with [`sqlx::Error::Protocol`] before anything is sent.
    pub async fn record(
        &mut self,
        worker: &str,
        batch: &[Completion],
    ) -> Result<Vec<i64>, sqlx::Error> {
        if !RecordSession::takes(batch) {
            return Err(sqlx::Error::Protocol(
                "a record session writes only batches of plain successes".into(),
            ));
        }
        record_succeeded(&mut self.conn, worker, batch).await
    }

    /// The session's connection, to read what it did (tests).
    pub fn connection(&mut self) -> &mut sqlx::PgConnection {
        &mut self.conn
    }
}

/// One column of a batch.
fn col<'a, T>(batch: &'a [Completion], f: impl Fn(&'a Completion) -> T) -> Vec<T> {
    batch.iter().map(f).collect()
}

/// A completion's report, if any.
fn report(c: &Completion) -> Option<&Report> {
    c.report.as_ref()
}

/// `record.sql`: any batch.
async fn record_any(
    db: impl PgExecutor<'_>,
    worker: &str,
    batch: &[Completion],
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(crate::sql::RECORD)
        .bind(col(batch, |c| c.lease.intent_id))
        .bind(col(batch, |c| c.lease.epoch))
        .bind(col(batch, |c| c.attempt))
        .bind(col(batch, |c| c.status))
        .bind(col(batch, |c| c.response.as_ref().map(Json)))
        .bind(col(batch, |c| c.external_reference.as_deref()))
        .bind(col(batch, |c| c.last_error.as_ref().map(Json)))
        .bind(col(batch, |c| c.next.as_str()))
        .bind(col(batch, |c| match c.next {
            Next::Retry(d) => d.as_secs_f64(),
            _ => 0.0,
        }))
        .bind(col(batch, |c| report(c).map(|r| r.kind)))
        .bind(col(batch, |c| {
            report(c).and_then(|r| r.status_code).map(i32::from)
        }))
        .bind(col(batch, |c| report(c).and_then(|r| r.error_code)))
        .bind(col(batch, |c| report(c).and_then(|r| r.detail.as_deref())))
        .bind(col(batch, |c| {
            report(c).map_or(0.0, |r| r.elapsed.as_secs_f64())
        }))
        .bind(col(batch, |c| c.phase))
        .bind(col(batch, |c| c.report.is_some()))
        .bind(worker)
        .bind(crate::DONE_CHANNEL)
        .fetch_all(db)
        .await
}

/// `record_succeeded.sql`: a batch of which every completion is a
/// [plain success](Completion::plain_success).
async fn record_succeeded(
    db: impl PgExecutor<'_>,
    worker: &str,
    batch: &[Completion],
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(crate::sql::RECORD_SUCCEEDED)
        .bind(col(batch, |c| c.lease.intent_id))
        .bind(col(batch, |c| c.lease.epoch))
        .bind(col(batch, |c| c.attempt))
        .bind(col(batch, |c| c.response.as_ref().map(Json)))
        .bind(col(batch, |c| c.external_reference.as_deref()))
        .bind(col(batch, |c| {
            report(c).and_then(|r| r.status_code).map(i32::from)
        }))
        .bind(col(batch, |c| report(c).and_then(|r| r.detail.as_deref())))
        .bind(col(batch, |c| {
            report(c).map_or(0.0, |r| r.elapsed.as_secs_f64())
        }))
        .bind(worker)
        .bind(crate::DONE_CHANNEL)
        .fetch_all(db)
        .await
}

/// Runs a fenced batch statement over `leases` with `worker` as the lease owner, then `extra`
/// parameters; returns the intents it touched.
macro_rules! fenced {
    ($sql:expr, $db:expr, $worker:expr, $leases:expr $(, $extra:expr)*) => {{
        let (ids, epochs) = columns($leases);
        sqlx::query_scalar($sql)
            .bind(ids)
            .bind(epochs)
            .bind($worker)
            $(.bind($extra))*
            .fetch_all($db)
            .await
    }};
}

/// Marks leased deliver rows as dispatched (the request may leave) and their intents
/// `in_flight`, fenced on `(intent_id, epoch)`. Returns the intents marked: only those may be
/// sent.
///
/// # Errors
/// The database's error; then nothing may be sent.
#[tracing::instrument(skip(db, leases), fields(n = leases.len()), err)]
pub async fn mark_dispatched(
    db: impl PgExecutor<'_>,
    worker: &str,
    leases: &[Lease],
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(crate::sql::MARK_DISPATCHED, db, worker, leases)
}

/// Deletes the `phase` rows (notify: dead letters; ask: approval requests) whose messages were
/// sent (fenced); returns those deleted.
///
/// # Errors
/// The database's error.
pub async fn messages_sent(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(crate::sql::MESSAGES_SENT, db, worker, leases, phase)
}

/// Reschedules the `phase` rows whose messages could not be sent (fenced), after `delay`.
///
/// # Errors
/// The database's error.
pub async fn messages_later(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
    delay: Duration,
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(
        crate::sql::MESSAGES_LATER,
        db,
        worker,
        leases,
        delay.as_secs_f64(),
        phase
    )
}

/// Moves claimed reconcile rows' intents from `unknown` to `reconciling`, fenced on
/// `(intent_id, epoch)`; returns the intents marked: only those may be looked up.
///
/// # Errors
/// The database's error.
pub async fn mark_reconciling(
    db: impl PgExecutor<'_>,
    worker: &str,
    leases: &[Lease],
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(crate::sql::MARK_RECONCILING, db, worker, leases)
}

/// Extends the leases of `phase` rows by `lease`; returns the ones still held.
///
/// # Errors
/// The database's error.
pub async fn renew(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
    lease: Duration,
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(
        crate::sql::RENEW,
        db,
        worker,
        leases,
        lease.as_secs_f64(),
        phase
    )
}

/// Gives leases back so another worker can take the rows at once; returns the rows released.
///
/// # Errors
/// The database's error.
pub async fn release(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
) -> Result<Vec<i64>, sqlx::Error> {
    fenced!(crate::sql::RELEASE, db, worker, leases, phase)
}

/// Defers leased rows without an attempt (fenced), each for its own delay (`delays[i]` for
/// `leases[i]`): gives the lease back and makes the row wait, for a destination whose breaker
/// is open, that is disabled, or that is over its rate. Returns the intents deferred.
///
/// # Errors
/// The database's error.
pub async fn defer(
    db: impl PgExecutor<'_>,
    worker: &str,
    phase: Phase,
    leases: &[Lease],
    delays: &[Duration],
) -> Result<Vec<i64>, sqlx::Error> {
    let delays: Vec<f64> = delays.iter().map(Duration::as_secs_f64).collect();
    fenced!(crate::sql::DEFER, db, worker, leases, phase, delays)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use oncebox_core::{AttemptError, AttemptKind, ErrorCode, IntentNames, NewIntent, Status};
    use serde_json::{Value, json};
    use sqlx::postgres::PgListener;
    use sqlx::{PgConnection, PgPool};

    use super::{Completion, Next, Report, record_any, record_succeeded};
    use crate::{Intake, Lease, Phase, TenantCursor, claim};

    /// A plain success, its optional fields chosen by `v`'s bits so that a batch covers them all.
    fn success(lease: Lease, v: usize) -> Completion {
        Completion {
            lease,
            phase: Phase::Deliver,
            attempt: 1 + (v % 3) as i32,
            status: Status::Succeeded,
            response: (v & 1 == 0).then(|| json!({"v": v, "nested": {"ok": true}})),
            external_reference: (v & 2 == 0).then(|| format!("ref-{v}")),
            last_error: None,
            next: Next::Done,
            report: Some(Report {
                kind: AttemptKind::Succeeded,
                status_code: (v & 4 == 0).then_some(200 + v as u16),
                error_code: None,
                detail: (v & 8 == 0).then(|| format!("detail {v}")),
                elapsed: Duration::from_millis(100 * v as u64 + 5),
            }),
        }
    }

    #[test]
    fn only_a_delivery_that_succeeded_with_nothing_left_is_plain() {
        let lease = Lease {
            intent_id: 1,
            epoch: 1,
        };
        assert!(success(lease, 0).plain_success());
        assert!(success(lease, 15).plain_success());
        let variants: [fn(&mut Completion); 7] = [
            |c| c.phase = Phase::Reconcile,
            |c| c.status = Status::Failed,
            |c| c.next = Next::Reconcile,
            |c| {
                c.last_error = Some(AttemptError::new(ErrorCode::Timeout, "slow"));
            },
            |c| c.report = None,
            |c| c.report.as_mut().expect("a report").kind = AttemptKind::LookupFound,
            |c| c.report.as_mut().expect("a report").error_code = Some(ErrorCode::HttpStatus),
        ];
        for (i, change) in variants.iter().enumerate() {
            let mut c = success(lease, 0);
            change(&mut c);
            assert!(!c.plain_success(), "variant {i} is not a plain success");
        }
    }

    /// Everything the two statements may write for the intent `id`, as JSON with the times
    /// turned into facts (set or not, how far apart).
    async fn image(conn: &mut PgConnection, id: i64) -> Value {
        sqlx::query_scalar(
            "SELECT json_build_object(
               'journal', (SELECT json_build_object(
                   'status', status, 'attempt_count', attempt_count, 'response', response,
                   'external_reference', external_reference, 'last_error', last_error,
                   'completed', completed_at IS NOT NULL,
                   'updated_now', updated_at = now(), 'completed_now', completed_at = now())
                 FROM oncebox.intents WHERE id = $1),
               'outbox', (SELECT json_agg(json_build_object(
                   'phase', phase, 'lease_owner', lease_owner, 'attempt', attempt)
                   ORDER BY phase) FROM oncebox.outbox WHERE intent_id = $1),
               'attempts', (SELECT json_agg(json_build_object(
                   'attempt', attempt, 'epoch', epoch, 'worker', worker, 'phase', phase,
                   'outcome', outcome, 'status_code', status_code, 'error_code', error_code,
                   'detail', detail, 'finished_now', finished_at = now(),
                   'took_ms', round(extract(epoch FROM finished_at - started_at) * 1000))
                   ORDER BY attempt) FROM oncebox.attempts WHERE intent_id = $1),
               'held', (SELECT count(*) FROM oncebox.held_arguments WHERE intent_id = $1))::jsonb",
        )
        .bind(id)
        .fetch_one(conn)
        .await
        .expect("image")
    }

    /// The short statement writes, for plain successes, exactly what the general one writes:
    /// the same batch is recorded by each over twin intents, claimed alike — some fenced out,
    /// one cancelled meanwhile — and every row either may write is compared.
    #[sqlx::test(migrations = "../../migrations")]
    async fn successes_are_recorded_as_the_general_statement_records_them(pool: PgPool) {
        const N: usize = 16;
        let intake = Intake::from_actions([("a".to_owned(), vec![])], None).expect("no rules");
        let mut tx = sqlx::Acquire::begin(&pool).await.expect("begin");
        let mut ids = Vec::new();
        for k in 0..2 * N {
            let new = NewIntent::new(
                IntentNames {
                    tenant_id: "t",
                    idempotency_key: &format!("k{k}"),
                    action: "a",
                },
                json!({"k": k}),
            );
            ids.push(intake.submit(&mut tx, new).await.expect("submit").intent.id);
        }
        tx.commit().await.expect("commit");
        let claimed = claim(
            &pool,
            Phase::Deliver,
            "w",
            2 * N as i64,
            Duration::from_secs(60),
            &mut TenantCursor::default(),
        )
        .await
        .expect("claim");
        assert_eq!(claimed.len(), 2 * N);
        let epoch = |id: i64| {
            claimed
                .iter()
                .find(|r| r.lease.intent_id == id)
                .expect("claimed")
                .lease
        };
        // In each half: the fourth row was taken over (its epoch moved on), the fifth's intent
        // cancelled after the claim.
        for half in [0, N] {
            sqlx::query("UPDATE oncebox.outbox SET epoch = epoch + 1 WHERE intent_id = $1")
                .bind(ids[half + 3])
                .execute(&pool)
                .await
                .expect("take over");
            sqlx::query(
                "UPDATE oncebox.intents SET status = 'cancelled', completed_at = now()
                 WHERE id = $1",
            )
            .bind(ids[half + 4])
            .execute(&pool)
            .await
            .expect("cancel");
        }
        let batch = |half: usize| -> Vec<Completion> {
            (0..N).map(|v| success(epoch(ids[half + v]), v)).collect()
        };
        let (short, general) = (batch(0), batch(N));
        assert!(short.iter().all(Completion::plain_success));

        let mut listener = PgListener::connect_with(&pool).await.expect("listener");
        listener.listen(crate::DONE_CHANNEL).await.expect("listen");
        // Each statement in its own transaction, its rows read inside it (times are compared
        // to its now()), and each heard by waiters once it commits.
        let mut written = Vec::new();
        let mut images = Vec::new();
        for (half, batch) in [(0, &short), (N, &general)] {
            let mut tx = sqlx::Acquire::begin(&pool).await.expect("begin");
            let mut ids_written = match half {
                0 => record_succeeded(&mut *tx, "w", batch).await,
                _ => record_any(&mut *tx, "w", batch).await,
            }
            .expect("record");
            ids_written.sort_unstable();
            written.push(
                ids_written
                    .iter()
                    .map(|id| ids.iter().position(|i| i == id).expect("ours") - half)
                    .collect::<Vec<_>>(),
            );
            let mut these = Vec::new();
            for v in 0..N {
                these.push(image(&mut tx, ids[half + v]).await);
            }
            images.push(these);
            tx.commit().await.expect("commit");
            let heard = tokio::time::timeout(Duration::from_secs(10), listener.recv())
                .await
                .expect("the statement notifies waiters")
                .expect("notification");
            assert_eq!(heard.channel(), crate::DONE_CHANNEL);
        }
        assert_eq!(written[0], written[1]);
        assert_eq!(written[0].len(), N - 1, "only the fenced row is refused");
        for (v, (short, general)) in images[0].iter().zip(&images[1]).enumerate() {
            assert_eq!(short, general, "intent {v} of the batch");
        }
        let succeeded = &images[0][0];
        assert_eq!(succeeded["journal"]["status"], "succeeded", "{succeeded}");
        assert_eq!(succeeded["journal"]["response"]["v"], 0, "{succeeded}");
        assert!(succeeded["outbox"].is_null(), "{succeeded}");
        assert_eq!(succeeded["attempts"][0]["took_ms"], 5, "{succeeded}");
    }
}
