//! Destination states in the store: a run of failures opens a breaker, exactly one of many
//! concurrent callers wins its probe, an answer closes it and a disable outlasts both; parked
//! deliveries of a disabled destination are made ready by its enable — whichever of the two
//! comes first — and rows parked behind an ordering lane's head are left alone.

use std::sync::Arc;
use std::time::Duration;

use oncebox_core::{IntentNames, NewIntent};
use oncebox_store::breaker::{
    TokensWanted, answered, claim_probe, disable, enable, failed, park, states, take_tokens,
};
use oncebox_store::{Intake, Lease, Phase, claim};
use serde_json::json;
use sqlx::{Connection, PgConnection, PgPool};

fn intake() -> Intake {
    Intake::from_actions([("a".to_owned(), vec![]), ("b".to_owned(), vec![])], None)
        .expect("no rule hashes")
}

async fn submit(pool: &PgPool, intent: NewIntent) -> i64 {
    let mut tx = pool.begin().await.expect("begin");
    let id = intake()
        .submit(&mut tx, intent)
        .await
        .expect("submit")
        .intent
        .id;
    tx.commit().await.expect("commit");
    id
}

async fn state_of(pool: &PgPool, destination: &str) -> String {
    states(pool)
        .await
        .expect("states")
        .into_iter()
        .find(|s| s.destination == destination)
        .map(|s| s.state)
        .unwrap_or_else(|| "closed".into())
}

async fn claim_all(pool: &PgPool) -> Vec<Lease> {
    let mut conn = pool.acquire().await.expect("conn");
    claim(
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
    .collect()
}

/// Seconds until `intent`'s delivery is ready (negative when it is).
async fn ready_in(pool: &PgPool, intent: i64) -> f64 {
    sqlx::query_scalar(
        "SELECT extract(epoch FROM available_at - now())::float8 FROM oncebox.outbox \
         WHERE intent_id = $1 AND phase = 'deliver'",
    )
    .bind(intent)
    .fetch_one(pool)
    .await
    .expect("outbox row")
}

#[sqlx::test(migrations = "../../migrations")]
async fn failures_open_an_answer_closes_and_a_disable_outlasts_both(pool: PgPool) {
    let cool_down = Duration::from_secs(60);
    assert_eq!(failed(&pool, "d", 3, cool_down).await.expect("1"), "closed");
    assert_eq!(failed(&pool, "d", 3, cool_down).await.expect("2"), "closed");
    assert_eq!(failed(&pool, "d", 3, cool_down).await.expect("3"), "open");
    assert!(
        !claim_probe(&pool, "d", cool_down).await.expect("probe"),
        "no probe before the cool-down"
    );
    assert!(answered(&pool, "d").await.expect("answer"));
    assert_eq!(state_of(&pool, "d").await, "closed");
    disable(&pool, "d", "operator: maintenance")
        .await
        .expect("disable");
    assert_eq!(
        failed(&pool, "d", 1, cool_down).await.expect("f"),
        "disabled"
    );
    assert!(
        !answered(&pool, "d").await.expect("answer"),
        "an answer does not enable"
    );
    assert_eq!(state_of(&pool, "d").await, "disabled");
}

/// Eight callers on eight connections claim the probe of one open breaker at the same
/// moment: exactly one wins it, for the whole pool.
#[sqlx::test(migrations = "../../migrations")]
async fn one_of_many_concurrent_callers_wins_the_probe(pool: PgPool) {
    // Open with a cool-down already over.
    assert_eq!(
        failed(&pool, "d", 1, Duration::ZERO).await.expect("open"),
        "open"
    );
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut callers = Vec::new();
    for _ in 0..8 {
        // Connections of their own: the test pool is smaller than the crowd.
        let mut conn = PgConnection::connect_with(&pool.connect_options())
            .await
            .expect("connection");
        let barrier = barrier.clone();
        callers.push(tokio::spawn(async move {
            barrier.wait().await;
            claim_probe(&mut conn, "d", Duration::from_secs(60))
                .await
                .expect("claim")
        }));
    }
    let mut won = 0;
    for c in callers {
        won += usize::from(c.await.expect("caller"));
    }
    assert_eq!(won, 1, "one probe for the pool");
    assert_eq!(state_of(&pool, "d").await, "half_open");
}

/// A disabled destination's leased rows are parked; its enable makes them ready again, and so
/// does a park that comes after the enable. Another destination's rows, and a row parked behind
/// its lane's head, are not touched.
#[sqlx::test(migrations = "../../migrations")]
async fn an_enable_makes_parked_deliveries_ready_whichever_comes_first(pool: PgPool) {
    let a1 = submit(
        &pool,
        NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: "a1",
                action: "a",
            },
            json!({}),
        ),
    )
    .await;
    let b1 = submit(
        &pool,
        NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: "b1",
                action: "b",
            },
            json!({}),
        ),
    )
    .await;
    let lane = |key: &str| NewIntent {
        ordering_key: Some("L".into()),
        ..NewIntent::new(
            IntentNames {
                tenant_id: "t",
                idempotency_key: key,
                action: "a",
            },
            json!({}),
        )
    };
    let _head = submit(&pool, lane("l1")).await;
    let behind = submit(&pool, lane("l2")).await;
    disable(&pool, "dest-a", "operator: maintenance")
        .await
        .expect("disable");
    let leases = claim_all(&pool).await;
    assert_eq!(leases.len(), 3, "a1, b1 and the lane's head");
    let a_leases: Vec<Lease> = leases
        .iter()
        .copied()
        .filter(|l| l.intent_id != b1)
        .collect();
    let wait = Duration::from_secs(300);
    let parked = park(&pool, "w", &a_leases, "dest-a", wait)
        .await
        .expect("park");
    assert_eq!(parked.len(), 2);
    assert!(ready_in(&pool, a1).await > 250.0, "parked for the wait");
    // The lease of b1 is still held: it is another destination's.

    let ready = enable(&pool, "dest-a", &["a".to_owned()])
        .await
        .expect("enable");
    assert_eq!(
        ready, 2,
        "a1 and the lane's head, not the row behind the head"
    );
    assert!(ready_in(&pool, a1).await <= 0.0);
    let behind_at: String =
        sqlx::query_scalar("SELECT available_at::text FROM oncebox.outbox WHERE intent_id = $1")
            .bind(behind)
            .fetch_one(&pool)
            .await
            .expect("row");
    assert_eq!(behind_at, "infinity", "still parked behind its head");
    assert_eq!(state_of(&pool, "dest-a").await, "closed");

    // A worker that read "disabled" before the enable parks after it: the row is ready at once.
    let again = claim_all(&pool).await;
    let mine: Vec<Lease> = again.into_iter().filter(|l| l.intent_id == a1).collect();
    assert_eq!(mine.len(), 1);
    park(&pool, "w", &mine, "dest-a", wait).await.expect("park");
    assert!(
        ready_in(&pool, a1).await <= 0.0,
        "a park after the enable leaves the row ready"
    );
}

/// A row parked while its intent has a deadline waits only until the deadline.
#[sqlx::test(migrations = "../../migrations")]
async fn a_parked_delivery_waits_no_longer_than_its_deadline(pool: PgPool) {
    let id = submit(
        &pool,
        NewIntent {
            deadline: Some(std::time::SystemTime::now() + Duration::from_secs(30)),
            ..NewIntent::new(
                IntentNames {
                    tenant_id: "t",
                    idempotency_key: "d1",
                    action: "a",
                },
                json!({}),
            )
        },
    )
    .await;
    disable(&pool, "dest-a", "operator: x")
        .await
        .expect("disable");
    let leases = claim_all(&pool).await;
    park(&pool, "w", &leases, "dest-a", Duration::from_secs(300))
        .await
        .expect("park");
    let wait = ready_in(&pool, id).await;
    assert!(
        (20.0..=30.0).contains(&wait),
        "ready at its deadline, in {wait} s"
    );
}

fn wanted(destination: &str, n: usize, per_second: f64, burst: f64) -> TokensWanted {
    TokensWanted {
        destination: destination.to_owned(),
        n,
        per_second,
        burst,
    }
}

/// One take serves every destination of a batch: each bucket is created full on its first
/// take, gives what it holds, and says how long until more; a destination named twice counts
/// once.
#[sqlx::test(migrations = "../../migrations")]
async fn one_take_serves_every_destination_of_a_batch(pool: PgPool) {
    let batch = [
        wanted("a", 3, 1.0, 5.0),
        wanted("b", 10, 1.0, 4.0),
        wanted("a", 99, 1.0, 5.0),
    ];
    let first = take_tokens(&pool, &batch).await.expect("take");
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(first["a"].0, 3, "a's first of its 5");
    assert_eq!(first["b"].0, 4, "b's whole burst");
    assert!(
        first["b"].1 > Duration::from_millis(500),
        "b is empty: {first:?}"
    );
    let second = take_tokens(&pool, &batch).await.expect("take again");
    assert_eq!(second["a"].0, 2, "what a had left");
    assert_eq!(second["b"].0, 0, "nothing refilled yet");
}

/// Workers taking tokens of the same destinations, each batch naming them in another order,
/// never deadlock: the statement locks the buckets in name order.
#[sqlx::test(migrations = "../../migrations")]
async fn takes_of_overlapping_destinations_do_not_deadlock(pool: PgPool) {
    let names: Vec<String> = (0..20).map(|i| format!("d{i:02}")).collect();
    let mut tasks = Vec::new();
    for reversed in [false, true, false, true] {
        let (pool, mut names) = (pool.clone(), names.clone());
        if reversed {
            names.reverse();
        }
        tasks.push(tokio::spawn(async move {
            let batch: Vec<TokensWanted> = names.iter().map(|d| wanted(d, 1, 1e6, 1e6)).collect();
            for _ in 0..50 {
                take_tokens(&pool, &batch).await?;
            }
            Ok::<(), sqlx::Error>(())
        }));
    }
    for t in tasks {
        t.await.expect("task").expect("no deadlock");
    }
}
