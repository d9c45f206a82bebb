//! Ordering lanes in the store: only a lane's head can be claimed; releasing it (success,
//! cancel, skip, or failure on a lane that skips) unparks the next; numbers follow commit order,
//! a replay takes none, and the repair sweep mends a number left without an intent.

use std::time::Duration;

use oncebox_core::config::Config;
use oncebox_core::{AttemptKind, IntentNames, NewIntent, Status};
use oncebox_store::ops::{self, Actor};
use oncebox_store::{Completion, Intake, Lease, Next, Phase, Report, claim, record};
use serde_json::json;
use sqlx::PgPool;

fn intake() -> Intake {
    Intake::from_actions([("a".to_owned(), vec![]), ("b".to_owned(), vec![])], None)
        .expect("no rule hashes")
}

fn ordered(key: &str, action: &str, lane: &str) -> NewIntent {
    NewIntent {
        ordering_key: Some(lane.into()),
        ..NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: key,
                action,
            },
            json!({"k": key}),
        )
    }
}

async fn submit(pool: &PgPool, intake: &Intake, intent: NewIntent) -> i64 {
    let mut tx = pool.begin().await.expect("begin");
    let id = intake
        .submit(&mut tx, intent)
        .await
        .expect("submit")
        .intent
        .id;
    tx.commit().await.expect("commit");
    id
}

/// Claims what is ready; returns the keys' ids and leases.
async fn claim_all(pool: &PgPool) -> Vec<Lease> {
    let mut conn = pool.acquire().await.expect("conn");
    let mut leases: Vec<Lease> = claim(
        &mut *conn,
        Phase::Deliver,
        "w",
        100,
        Duration::from_secs(30),
        &mut oncebox_store::TenantCursor::default(),
    )
    .await
    .expect("claim")
    .into_iter()
    .map(|r| r.lease)
    .collect();
    leases.sort_by_key(|l| l.intent_id);
    leases
}

async fn finish(pool: &PgPool, lease: Lease, status: Status) {
    let kind = if status == Status::Succeeded {
        AttemptKind::Succeeded
    } else {
        AttemptKind::Permanent
    };
    let done = Completion {
        lease,
        phase: Phase::Deliver,
        attempt: 1,
        status,
        response: None,
        external_reference: None,
        last_error: None,
        next: Next::Done,
        report: Some(Report {
            kind,
            status_code: Some(201),
            error_code: None,
            detail: None,
            elapsed: Duration::from_millis(1),
        }),
    };
    let mut conn = pool.acquire().await.expect("conn");
    let written = record(&mut *conn, "w", &[done]).await.expect("record");
    assert_eq!(written.len(), 1);
}

/// (head, last) of lane `lane` of destination `a`.
async fn lane_state(pool: &PgPool, lane: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT head_seq, last_seq FROM oncebox.lanes WHERE destination = 'a' AND ordering_key = $1",
    )
    .bind(lane)
    .fetch_one(pool)
    .await
    .expect("lane")
}

#[sqlx::test(migrations = "../../migrations")]
async fn only_each_lanes_head_is_claimed_and_its_release_unparks_the_next(pool: PgPool) {
    let intake = intake();
    let x1 = submit(&pool, &intake, ordered("x1", "a", "X")).await;
    let x2 = submit(&pool, &intake, ordered("x2", "a", "X")).await;
    let x3 = submit(&pool, &intake, ordered("x3", "a", "X")).await;
    let x4 = submit(&pool, &intake, ordered("x4", "a", "X")).await;
    // The same ordering key to another destination (action b) is another lane.
    let bx = submit(&pool, &intake, ordered("bx", "b", "X")).await;
    let free = submit(
        &pool,
        &intake,
        NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: "free",
                action: "a",
            },
            json!({}),
        ),
    )
    .await;

    let first = claim_all(&pool).await;
    let ids: Vec<i64> = first.iter().map(|l| l.intent_id).collect();
    assert_eq!(
        ids,
        vec![x1, bx, free],
        "one head per lane, and the free intent"
    );
    assert!(claim_all(&pool).await.is_empty(), "x2 waits for x1");

    // x3 is cancelled while it waits; the lane will pass over it.
    let mut tx = pool.begin().await.expect("begin");
    ops::cancel(
        &mut tx,
        x3,
        &Actor::new("ana", "ops", "cli"),
        Some("not wanted"),
    )
    .await
    .expect("a parked intent can be cancelled");
    tx.commit().await.expect("commit");
    assert!(
        claim_all(&pool).await.is_empty(),
        "cancelling x3 does not release x1's lane"
    );

    finish(&pool, first[0], Status::Succeeded).await;
    let second = claim_all(&pool).await;
    assert_eq!(
        second.iter().map(|l| l.intent_id).collect::<Vec<_>>(),
        vec![x2]
    );
    finish(&pool, second[0], Status::Succeeded).await;
    let third = claim_all(&pool).await;
    assert_eq!(
        third.iter().map(|l| l.intent_id).collect::<Vec<_>>(),
        vec![x4],
        "x3 was cancelled: the lane goes on to x4"
    );
    finish(&pool, third[0], Status::Succeeded).await;
    assert_eq!(lane_state(&pool, "X").await, (5, 4), "the lane is idle");

    // An idle lane's next intent is ready at once.
    let x5 = submit(&pool, &intake, ordered("x5", "a", "X")).await;
    let next = claim_all(&pool).await;
    assert_eq!(
        next.iter().map(|l| l.intent_id).collect::<Vec<_>>(),
        vec![x5]
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_failed_head_blocks_until_skipped_and_a_skipping_lane_goes_on(pool: PgPool) {
    let config = Config::from_toml(
        r#"
[actions.a]
destination = "blocking"
[actions.b]
destination = "skipping"
[destinations.blocking]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "key"
[destinations.skipping]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "key"
[destinations.skipping.ordering]
on_failure = "skip"
"#,
    )
    .expect("config");
    let intake = Intake::new(&config, None).expect("no rule hashes");
    let a1 = submit(&pool, &intake, ordered("a1", "a", "L")).await;
    let a2 = submit(&pool, &intake, ordered("a2", "a", "L")).await;
    let b1 = submit(&pool, &intake, ordered("b1", "b", "L")).await;
    let b2 = submit(&pool, &intake, ordered("b2", "b", "L")).await;
    let heads = claim_all(&pool).await;
    assert_eq!(
        heads.iter().map(|l| l.intent_id).collect::<Vec<_>>(),
        vec![a1, b1]
    );
    finish(&pool, heads[0], Status::Failed).await;
    finish(&pool, heads[1], Status::Failed).await;
    let next = claim_all(&pool).await;
    assert_eq!(
        next.iter().map(|l| l.intent_id).collect::<Vec<_>>(),
        vec![b2],
        "the skipping lane goes on; the blocking one waits"
    );
    let blocked = oncebox_store::lanes::list(&pool, Some("t"), true, 10)
        .await
        .expect("list");
    assert_eq!(blocked.len(), 1);
    assert_eq!(blocked[0].destination, "blocking");
    assert_eq!(blocked[0].head_id, Some(a1));
    assert_eq!(blocked[0].head_status, Some(Status::Failed));
    assert_eq!(
        oncebox_store::lanes::blocked(&pool).await.expect("gauge"),
        1
    );

    // An operator retry puts the head back in front of its lane: a2 still waits.
    let actor = Actor::new("ana", "ops", "cli");
    let mut tx = pool.begin().await.expect("begin");
    ops::retry(&mut tx, a1, &actor, "receiver fixed")
        .await
        .expect("retry");
    tx.commit().await.expect("commit");
    let retried = claim_all(&pool).await;
    assert_eq!(
        retried.iter().map(|l| l.intent_id).collect::<Vec<_>>(),
        vec![a1]
    );
    finish(&pool, retried[0], Status::Failed).await;

    let mut tx = pool.begin().await.expect("begin");
    ops::skip(&mut tx, a1, &actor, "voided")
        .await
        .expect("skip");
    tx.commit().await.expect("commit");
    let after = claim_all(&pool).await;
    assert_eq!(
        after.iter().map(|l| l.intent_id).collect::<Vec<_>>(),
        vec![a2]
    );
    assert_eq!(
        oncebox_store::lanes::blocked(&pool).await.expect("gauge"),
        0
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_replay_takes_no_number_and_the_sweep_repairs_a_number_left_empty(pool: PgPool) {
    let intake = intake();
    let x1 = submit(&pool, &intake, ordered("x1", "a", "X")).await;
    let mut tx = pool.begin().await.expect("begin");
    let again = intake
        .submit(&mut tx, ordered("x1", "a", "X"))
        .await
        .expect("replay");
    tx.commit().await.expect("commit");
    assert!(!again.created);
    assert_eq!(again.intent.id, x1);
    assert_eq!(again.intent.ordering_key.as_deref(), Some("X"));
    assert_eq!(
        lane_state(&pool, "X").await,
        (1, 1),
        "the replay took no number"
    );
    let head = claim_all(&pool).await;
    finish(&pool, head[0], Status::Succeeded).await;

    // A replay racing the first submit of its key can take a number and leave no intent: here
    // made by hand. The next intent waits behind the empty number until the sweep moves on.
    sqlx::query("UPDATE oncebox.lanes SET last_seq = last_seq + 1")
        .execute(&pool)
        .await
        .expect("an empty number");
    let x3 = submit(&pool, &intake, ordered("x3", "a", "X")).await;
    assert!(
        claim_all(&pool).await.is_empty(),
        "x3 is parked behind number 2"
    );
    assert_eq!(oncebox_store::lanes::repair(&pool).await.expect("sweep"), 1);
    let next = claim_all(&pool).await;
    assert_eq!(
        next.iter().map(|l| l.intent_id).collect::<Vec<_>>(),
        vec![x3]
    );
    assert_eq!(oncebox_store::lanes::repair(&pool).await.expect("sweep"), 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn concurrent_submits_to_one_lane_take_distinct_numbers_and_one_is_ready(pool: PgPool) {
    let intake = intake();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (pool, intake) = (pool.clone(), intake.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                submit(&pool, &intake, ordered(&format!("c{t}-{i}"), "a", "C")).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let seqs: Vec<i64> =
        sqlx::query_scalar("SELECT lane_seq FROM oncebox.intents ORDER BY lane_seq")
            .fetch_all(&pool)
            .await
            .expect("numbers");
    assert_eq!(seqs, (1..=200).collect::<Vec<i64>>());
    let ids_by_seq: Vec<i64> =
        sqlx::query_scalar("SELECT id FROM oncebox.intents ORDER BY lane_seq")
            .fetch_all(&pool)
            .await
            .expect("ids");
    assert!(
        ids_by_seq.windows(2).all(|w| w[0] < w[1]),
        "numbers follow the order the intents were written in"
    );
    assert_eq!(claim_all(&pool).await.len(), 1, "only the head is ready");
}
