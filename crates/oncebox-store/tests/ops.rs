//! Operator changes against the real Postgres: one table (`OPERATOR_TRANSITIONS`) decides what
//! an operator may do, and a refusal changes nothing.

use oncebox_core::{IntentNames, NewIntent, Status};
use oncebox_store::ops::{self, Actor, OpsError, Resolution};
use oncebox_store::{Intake, intent_by_key};
use serde_json::json;
use sqlx::PgPool;

/// Submits intent `key` and puts it in `status` as a worker would have.
async fn intent_in(pool: &PgPool, key: &str, status: Status) -> i64 {
    let intake = Intake::from_actions([("a".to_owned(), vec![])], None)
        .expect("no rule hashes")
        .with_notify(false);
    let mut tx = pool.begin().await.expect("begin");
    let id = intake
        .submit(
            &mut tx,
            NewIntent::new(
                IntentNames {
                    tenant_id: "t",
                    idempotency_key: key,
                    action: "a",
                },
                json!({"n": 1}),
            ),
        )
        .await
        .expect("submit")
        .intent
        .id;
    tx.commit().await.expect("commit");
    sqlx::query(
        "UPDATE oncebox.intents SET status = $2, attempt_count = 1, \
         completed_at = CASE WHEN oncebox.is_terminal($2) THEN now() END WHERE id = $1",
    )
    .bind(id)
    .bind(status)
    .execute(pool)
    .await
    .expect("status");
    id
}

fn ana() -> Actor {
    Actor::new("ana", "ops", "cli")
}

async fn refusal<T: std::fmt::Debug>(
    pool: &PgPool,
    change: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, OpsError>,
) -> String {
    let mut tx = pool.begin().await.expect("begin");
    let result = change(&mut tx).await;
    // Rolled back now, not when the connection is next used: a refusal's locks must not
    // outlive it.
    tx.rollback().await.expect("rollback");
    match result {
        Err(OpsError::Refused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn resolve_follows_the_operator_table(pool: PgPool) {
    let succeeded = Resolution::Succeeded { reference: None };
    // What an outside check found: `unknown` was resolvable, which no transition allows.
    for status in [Status::Unknown, Status::InFlight, Status::Reconciling] {
        let id = intent_in(&pool, &format!("k-{status}"), status).await;
        let why = refusal(&pool, async |tx| {
            ops::resolve(tx, id, &succeeded, &ana(), None).await
        })
        .await;
        assert!(
            why.contains(&format!("is {status}")) && why.contains("worker"),
            "{why}"
        );
        let i = intent_by_key(&pool, "t", &format!("k-{status}"))
            .await
            .expect("read")
            .expect("there");
        assert_eq!(i.status, status, "a refusal changes nothing");
    }
    let id = intent_in(&pool, "review", Status::NeedsReview).await;
    let mut tx = pool.begin().await.expect("begin");
    let done = ops::resolve(&mut tx, id, &succeeded, &ana(), Some("checked"))
        .await
        .expect("needs_review is resolved");
    tx.commit().await.expect("commit");
    assert_eq!(done.status, Status::Succeeded);
    let why = refusal(&pool, async |tx| ops::retry(tx, id, &ana(), "again").await).await;
    assert!(why.contains("repeat its effect"), "{why}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn cancelling_twice_says_it_is_already_cancelled(pool: PgPool) {
    let id = intent_in(&pool, "c", Status::Cancelled).await;
    let why = refusal(&pool, async |tx| ops::cancel(tx, id, &ana(), None).await).await;
    assert_eq!(why, "intent c is already cancelled");
}

#[sqlx::test(migrations = "../../migrations")]
async fn every_decision_writes_an_audit_row_in_its_own_transaction(pool: PgPool) {
    let review = intent_in(&pool, "review", Status::NeedsReview).await;
    let failed = intent_in(&pool, "failed", Status::Failed).await;
    // Rolled back: neither the change nor its audit row is there.
    let mut tx = pool.begin().await.expect("begin");
    ops::retry(&mut tx, failed, &ana(), "try once more")
        .await
        .expect("retry");
    tx.rollback().await.expect("rollback");
    assert!(
        ops::audit_log(&pool, None, None, 10)
            .await
            .expect("log")
            .is_empty()
    );
    let succeeded = Resolution::Succeeded {
        reference: Some("INV-7".into()),
    };
    let mut tx = pool.begin().await.expect("begin");
    ops::resolve(
        &mut tx,
        review,
        &succeeded,
        &ana(),
        Some("found it in billing"),
    )
    .await
    .expect("resolve");
    let token = Actor::new("token 3", "ops", "api");
    ops::retry(&mut tx, failed, &token, "receiver fixed")
        .await
        .expect("retry");
    tx.commit().await.expect("commit");
    let log = ops::audit_log(&pool, None, None, 10).await.expect("log");
    let rows: Vec<_> = log
        .iter()
        .map(|r| {
            (
                r.idempotency_key.as_str(),
                r.actor.as_str(),
                r.role.as_str(),
                r.via.as_str(),
                r.action.as_str(),
                r.reason.as_deref(),
                r.status_before,
                r.status_after,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                "failed",
                "token 3",
                "ops",
                "api",
                "retry",
                Some("receiver fixed"),
                Status::Failed,
                Status::Pending
            ),
            (
                "review",
                "ana",
                "ops",
                "cli",
                "resolve",
                Some("found it in billing"),
                Status::NeedsReview,
                Status::Succeeded
            ),
        ],
        "newest first"
    );
    let one = ops::audit_log(&pool, Some("t"), Some("review"), 10)
        .await
        .expect("log");
    assert_eq!(one.len(), 1);
    // A refused decision changes nothing and is not audited.
    let why = refusal(&pool, async |tx| {
        ops::cancel(tx, review, &ana(), None).await
    })
    .await;
    assert!(why.contains("succeeded"), "{why}");
    assert_eq!(
        ops::audit_log(&pool, None, None, 10)
            .await
            .expect("log")
            .len(),
        2
    );
    // Purged with its intent, and only then.
    sqlx::query(
        "UPDATE oncebox.intents SET completed_at = now() - interval '40 days' WHERE id = $1",
    )
    .bind(review)
    .execute(&pool)
    .await
    .expect("age");
    let attempts = async |id: i64| -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM oncebox.attempts WHERE intent_id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .expect("attempts")
    };
    let (review_attempts, failed_attempts) = (attempts(review).await, attempts(failed).await);
    assert!(review_attempts > 0 && failed_attempts > 0);
    let purged = ops::purge(&pool, std::time::Duration::from_secs(30 * 86_400))
        .await
        .expect("purge");
    assert_eq!(purged, 1);
    let left = ops::audit_log(&pool, None, None, 10).await.expect("log");
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].idempotency_key, "failed");
    // Its retry report goes with it (the trigger intents_purge_attempts: no foreign key since
    // migration 0013); the other intent's stays.
    assert_eq!(attempts(review).await, 0);
    assert_eq!(attempts(failed).await, failed_attempts);
}

/// A purge goes on batch after batch until nothing old is left (oldest first), and removes
/// nothing younger than the retention nor anything not terminal, however old.
#[sqlx::test(migrations = "../../migrations")]
async fn a_purge_removes_every_batch_of_old_intents_and_nothing_else(pool: PgPool) {
    let old = ops::PURGE_BATCH * 2 + 7;
    // Terminal intents completed 40 days ago (beyond a 30-day retention), one day ago (within
    // it), and pending ones created 40 days ago.
    sqlx::query(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload,
                                      status, created_at, updated_at, completed_at)
         SELECT 't', k || g, 'a', repeat('0', 64), '{}', s::oncebox.intent_status, at, at,
                CASE WHEN s = 'pending' THEN NULL ELSE at END
         FROM (VALUES ('old-', $1::bigint, 'succeeded', now() - interval '40 days'),
                      ('young-', 5, 'failed', now() - interval '1 day'),
                      ('waiting-', 5, 'pending', now() - interval '40 days')) AS v(k, n, s, at),
              generate_series(1, n) g",
    )
    .bind(old)
    .execute(&pool)
    .await
    .expect("journal");
    let purged = ops::purge(&pool, std::time::Duration::from_secs(30 * 86_400))
        .await
        .expect("purge");
    assert_eq!(purged, old, "every old terminal intent, over three batches");
    let left: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT split_part(idempotency_key, '-', 1) FROM oncebox.intents ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .expect("left");
    assert_eq!(left, ["waiting", "young"]);
}

/// What the protocol model found: a worker claims a row for a destination that honours keys (no
/// dispatch mark), sends, and stops (its lease given back) or stalls past its lease; a cancel
/// then succeeded, and the request still on its way made an effect for a cancelled intent. A
/// row that a worker holds or held cannot be cancelled; a released row is taken over at once.
#[sqlx::test(migrations = "../../migrations")]
async fn a_row_a_worker_held_cannot_be_cancelled_and_a_released_one_is_taken_at_once(pool: PgPool) {
    use oncebox_store::{Phase, TenantCursor};
    use std::time::Duration;
    let intake = Intake::from_actions([("a".to_owned(), vec![])], None)
        .expect("no rule hashes")
        .with_notify(false);
    let mut ids = Vec::new();
    for key in ["stopped", "stalled"] {
        let mut tx = pool.begin().await.expect("begin");
        let new = NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: key,
                action: "a",
            },
            json!({"n": 1}),
        );
        ids.push(intake.submit(&mut tx, new).await.expect("submit").intent.id);
        tx.commit().await.expect("commit");
    }
    let claim = async |worker: &str| {
        let mut conn = pool.acquire().await.expect("connection");
        let lease = Duration::from_secs(3600);
        let mut cursor = TenantCursor::default();
        oncebox_store::claim(&mut *conn, Phase::Deliver, worker, 2, lease, &mut cursor)
            .await
            .expect("claim")
    };
    let rows = claim("w1").await;
    assert_eq!(rows.len(), 2);
    let stopped = rows
        .iter()
        .find(|r| r.lease.intent_id == ids[0])
        .expect("claimed");
    let released = oncebox_store::release(&pool, "w1", Phase::Deliver, &[stopped.lease])
        .await
        .expect("release");
    assert_eq!(released, vec![ids[0]]);
    sqlx::query(
        "UPDATE oncebox.outbox SET lease_expires_at = now() - interval '1 s' WHERE intent_id = $1",
    )
    .bind(ids[1])
    .execute(&pool)
    .await
    .expect("the stalled worker's lease runs out");
    for (id, key) in ids.iter().zip(["stopped", "stalled"]) {
        let why = refusal(&pool, async |tx| ops::cancel(tx, *id, &ana(), None).await).await;
        assert!(
            why.contains("worker w1") && why.contains("may have dispatched"),
            "{key}: {why}"
        );
        let i = intent_by_key(&pool, "t", key)
            .await
            .expect("read")
            .expect("there");
        assert_eq!(
            i.status,
            Status::Pending,
            "{key}: a refusal changes nothing"
        );
    }
    // Both rows go to the next worker at once: neither waits for its lease.
    let taken = claim("w2").await;
    let mut taken: Vec<(i64, i64, bool)> = taken
        .iter()
        .map(|r| (r.lease.intent_id, r.lease.epoch, r.lease_taken_over))
        .collect();
    taken.sort_unstable();
    assert_eq!(taken, vec![(ids[0], 2, true), (ids[1], 2, true)]);
}
