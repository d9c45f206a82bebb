//! Operator changes against the real Postgres: one table (`OPERATOR_TRANSITIONS`) decides what
//! an operator may do, and a refusal changes nothing.

use oncebox_core::{NewIntent, Status};
use oncebox_store::ops::{self, OpsError, Resolution};
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
        .submit(&mut tx, NewIntent::new("t", key, "a", json!({"n": 1})))
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

async fn refusal<T: std::fmt::Debug>(
    pool: &PgPool,
    change: impl AsyncFnOnce(&mut sqlx::PgConnection) -> Result<T, OpsError>,
) -> String {
    let mut tx = pool.begin().await.expect("begin");
    match change(&mut tx).await {
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
            ops::resolve(tx, id, &succeeded, "ana").await
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
    let done = ops::resolve(&mut tx, id, &succeeded, "ana")
        .await
        .expect("needs_review is resolved");
    tx.commit().await.expect("commit");
    assert_eq!(done.status, Status::Succeeded);
    let why = refusal(&pool, async |tx| ops::retry(tx, id, "ana", "again").await).await;
    assert!(why.contains("repeat its effect"), "{why}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn cancelling_twice_says_it_is_already_cancelled(pool: PgPool) {
    let id = intent_in(&pool, "c", Status::Cancelled).await;
    let why = refusal(&pool, async |tx| ops::cancel(tx, id, "ana").await).await;
    assert_eq!(why, "intent c is already cancelled");
}
