//! Fencing: a worker whose lease was taken over can write nothing — not a dispatch mark, not an
//! outcome, not a renewal — while the new owner's writes go through.

use std::time::Duration;

use oncebox_core::{IntentNames, NewIntent};
use oncebox_store::{
    ClaimedRow, Completion, Intake, Lease, Phase, RecordSession, claim, mark_dispatched, record,
    renew,
};
use serde_json::json;
use sqlx::{PgExecutor, PgPool};

mod common;

/// A plain success of the delivery of intent `intent_id` at `epoch`, answered by `who`.
fn succeeded(intent_id: i64, epoch: i64, who: &str) -> Completion {
    common::succeeded(Lease { intent_id, epoch }, who)
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_stale_worker_cannot_overwrite_the_new_owner(pool: PgPool) {
    let id = claimed_then_expired(&pool).await;
    let mut conn = pool.acquire().await.expect("conn");
    let b = claim_for(&mut *conn, "owner").await.expect("claim b");
    assert_eq!((b[0].lease.epoch, b[0].lease_taken_over), (2, true));

    // The stale worker (epoch 1) is fenced out of every write.
    assert!(
        mark_dispatched(
            &mut *conn,
            "stale",
            &[Lease {
                intent_id: id,
                epoch: 1
            }]
        )
        .await
        .expect("mark")
        .is_empty()
    );
    assert!(
        renew(
            &mut *conn,
            "stale",
            Phase::Deliver,
            &[Lease {
                intent_id: id,
                epoch: 1
            }],
            Duration::from_secs(30)
        )
        .await
        .expect("renew")
        .is_empty()
    );
    assert!(
        record(&mut *conn, "stale", &[succeeded(id, 1, "stale")])
            .await
            .expect("record")
            .is_empty()
    );
    // Even with the right epoch, another owner's name is refused.
    assert!(
        record(&mut *conn, "stale", &[succeeded(id, 2, "stale")])
            .await
            .expect("record")
            .is_empty()
    );
    let (status, attempts, dispatched): (String, i64, Option<String>) = sqlx::query_as(
        "SELECT i.status::text, (SELECT count(*) FROM oncebox.attempts), o.dispatched_at::text
         FROM oncebox.intents i JOIN oncebox.outbox o ON o.intent_id = i.id",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("state");
    assert_eq!(
        (status.as_str(), attempts, dispatched),
        ("pending", 0, None),
        "the stale worker wrote nothing"
    );

    // The owner's record goes through, whole: journal, report, outbox row gone.
    assert_eq!(
        record(&mut *conn, "owner", &[succeeded(id, 2, "owner")])
            .await
            .expect("record"),
        vec![id]
    );
    let (status, reference, attempts, outbox): (String, String, i64, i64) = sqlx::query_as(
        "SELECT status::text, external_reference, (SELECT count(*) FROM oncebox.attempts),
                (SELECT count(*) FROM oncebox.outbox) FROM oncebox.intents",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("state");
    assert_eq!(
        (status.as_str(), reference.as_str(), attempts, outbox),
        ("succeeded", "ref-owner", 1, 0)
    );
    // And a late stale write after completion still changes nothing.
    assert!(
        record(&mut *conn, "stale", &[succeeded(id, 1, "stale")])
            .await
            .expect("record")
            .is_empty()
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_worker_that_claims_its_row_again_cannot_record_its_earlier_attempt(pool: PgPool) {
    // The lease of worker "stale" expired and the same worker claimed the row again: the
    // owner's name matches, and only the epoch tells the two attempts apart.
    let id = claimed_then_expired(&pool).await;
    let again = claim_for(&pool, "stale").await.expect("claim again");
    assert_eq!(again[0].lease.epoch, 2);
    let earlier = [succeeded(id, 1, "stale")];
    let earlier_retry = [common::retried(Lease {
        intent_id: id,
        epoch: 1,
    })];
    for (batch, statement) in [(&earlier, "successes"), (&earlier_retry, "any outcome")] {
        let written = record(&pool, "stale", batch).await.expect("record");
        assert!(
            written.is_empty(),
            "the record of {statement} is fenced by the epoch"
        );
    }
    let attempts: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.attempts")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(attempts, 0, "nothing of the earlier attempt is written");
    let written = record(&pool, "stale", &[succeeded(id, 2, "stale")])
        .await
        .expect("record");
    assert_eq!(
        written,
        vec![id],
        "the current attempt's outcome is written"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_record_session_is_fenced_as_the_pool_is(pool: PgPool) {
    // The session's plan is made and cached first (an empty batch), as a worker's is by its
    // first record; the records below run that cached plan.
    let mut session = RecordSession::open(&pool).await.expect("session");
    assert!(session.record("w", &[]).await.expect("record").is_empty());
    let id = claimed_then_expired(&pool).await;
    let b = claim_for(&pool, "owner").await.expect("claim b");
    assert_eq!(b[0].lease.epoch, 2);

    for (who, epoch, why) in [
        ("stale", 1, "a stale epoch"),
        ("stale", 2, "another owner's lease"),
        ("owner", 1, "the owner's own earlier epoch"),
    ] {
        let written = session
            .record(who, &[succeeded(id, epoch, who)])
            .await
            .expect("record");
        assert!(written.is_empty(), "a record under {why} wrote {written:?}");
    }
    let (status, attempts, outbox) = state(&pool).await;
    assert_eq!(
        (status.as_str(), attempts, outbox),
        ("pending", 0, 1),
        "nothing was written"
    );
    let written = session
        .record("owner", &[succeeded(id, 2, "owner")])
        .await
        .expect("record");
    assert_eq!(written, vec![id], "the owner's record goes through");
    assert_eq!(state(&pool).await, ("succeeded".to_owned(), 1, 0));

    // A batch that is not all plain successes is refused before anything is sent.
    let retry = common::retried(Lease {
        intent_id: id,
        epoch: 2,
    });
    assert!(matches!(
        session.record("owner", &[retry]).await,
        Err(sqlx::Error::Protocol(_))
    ));
}

/// The first intent's status, the attempts reported and the outbox rows left.
async fn state(pool: &PgPool) -> (String, i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT status::text FROM oncebox.intents ORDER BY id LIMIT 1),
                (SELECT count(*) FROM oncebox.attempts), (SELECT count(*) FROM oncebox.outbox)",
    )
    .fetch_one(pool)
    .await
    .expect("state")
}

/// Claims up to ten deliver rows for worker `who`, leased for 30 s.
async fn claim_for(db: impl PgExecutor<'_>, who: &str) -> Result<Vec<ClaimedRow>, sqlx::Error> {
    claim(
        db,
        Phase::Deliver,
        who,
        10,
        Duration::from_secs(30),
        &mut oncebox_store::TenantCursor::default(),
    )
    .await
}

/// One intent submitted and claimed by `stale` (epoch 1), its lease already expired; its id.
async fn claimed_then_expired(pool: &PgPool) -> i64 {
    let intake = Intake::from_actions([("a".to_owned(), vec![])], None).expect("no rule hashes");
    let mut tx = pool.begin().await.expect("begin");
    let id = intake
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
        .expect("submit")
        .intent
        .id;
    tx.commit().await.expect("commit");
    let claimed = claim_for(pool, "stale").await.expect("claim");
    assert_eq!(claimed[0].lease.epoch, 1);
    sqlx::query("UPDATE oncebox.outbox SET lease_expires_at = now() - interval '1 second'")
        .execute(pool)
        .await
        .expect("expire");
    id
}

/// Waits until a statement of another session waits for a row lock: the record under test.
async fn until_a_record_waits_for_a_lock(pool: &PgPool) {
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .expect("pg_stat_activity");
        if waiting > 0 {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// The journal's status, the attempts rows and the outbox row's owner and epoch.
async fn written(pool: &PgPool) -> (String, i64, Option<(Option<String>, i64)>) {
    let (status, attempts): (String, i64) = sqlx::query_as(
        "SELECT status::text, (SELECT count(*) FROM oncebox.attempts) FROM oncebox.intents",
    )
    .fetch_one(pool)
    .await
    .expect("journal");
    let row = sqlx::query_as("SELECT lease_owner, epoch FROM oncebox.outbox")
        .fetch_optional(pool)
        .await
        .expect("outbox");
    (status, attempts, row)
}

/// A record that waits on the row while another worker takes the lease over is checked against
/// the row as the takeover left it: it writes nothing, neither to the journal nor to the
/// attempts, and the new owner keeps its row.
#[sqlx::test(migrations = "../../migrations")]
async fn a_takeover_committed_while_a_record_waits_wins(pool: PgPool) {
    takeover_while_a_record_waits(&pool, |lease| common::succeeded(lease, "stale")).await;
}

/// The same with a retry, an outcome the general record statement writes (plain successes take
/// a statement of their own).
#[sqlx::test(migrations = "../../migrations")]
async fn a_takeover_committed_while_a_record_of_a_retry_waits_wins(pool: PgPool) {
    takeover_while_a_record_waits(&pool, common::retried).await;
}

/// Records the stale worker's `outcome` of its lease while another worker's takeover of the row
/// is under way, then commits the takeover.
async fn takeover_while_a_record_waits(pool: &PgPool, outcome: fn(Lease) -> Completion) {
    let id = claimed_then_expired(pool).await;
    let mut takeover = pool.begin().await.expect("begin");
    let taken = claim_for(&mut *takeover, "owner").await.expect("take over");
    assert_eq!((taken[0].lease.epoch, taken[0].lease_taken_over), (2, true));

    let stale = {
        let pool = pool.clone();
        let lease = Lease {
            intent_id: id,
            epoch: 1,
        };
        tokio::spawn(async move { record(&pool, "stale", &[outcome(lease)]).await })
    };
    until_a_record_waits_for_a_lock(pool).await;
    takeover.commit().await.expect("commit the takeover");

    let recorded = stale.await.expect("record task").expect("record");
    assert!(recorded.is_empty(), "the stale record wrote {recorded:?}");
    assert_eq!(
        written(pool).await,
        ("pending".to_owned(), 0, Some((Some("owner".to_owned()), 2))),
        "the stale worker wrote nothing and the owner keeps its row"
    );
}

/// The other way round: a write by the owner itself that the record waits on (its lease
/// renewed) leaves the fence as it was, and the record goes through whole.
#[sqlx::test(migrations = "../../migrations")]
async fn a_renewal_committed_while_a_record_waits_lets_it_through(pool: PgPool) {
    let written =
        renewal_while_a_record_waits(&pool, |lease| common::succeeded(lease, "stale")).await;
    assert_eq!(written, ("succeeded".to_owned(), 1, None));
}

/// The same with a retry, written by the general record statement: the row is given back for its
/// next attempt.
#[sqlx::test(migrations = "../../migrations")]
async fn a_renewal_committed_while_a_record_of_a_retry_waits_lets_it_through(pool: PgPool) {
    let written = renewal_while_a_record_waits(&pool, common::retried).await;
    assert_eq!(written, ("pending".to_owned(), 1, Some((None, 1))));
}

/// Records the lease owner's `outcome` while its own renewal of the lease is under way, then
/// commits the renewal; checks the record went through and returns what is written.
async fn renewal_while_a_record_waits(
    pool: &PgPool,
    outcome: fn(Lease) -> Completion,
) -> (String, i64, Option<(Option<String>, i64)>) {
    let id = claimed_then_expired(pool).await;
    let mut renewal = pool.begin().await.expect("begin");
    let renewed = renew(
        &mut *renewal,
        "stale",
        Phase::Deliver,
        &[Lease {
            intent_id: id,
            epoch: 1,
        }],
        Duration::from_secs(30),
    )
    .await
    .expect("renew");
    assert_eq!(renewed, vec![id]);

    let owner = {
        let pool = pool.clone();
        let lease = Lease {
            intent_id: id,
            epoch: 1,
        };
        tokio::spawn(async move { record(&pool, "stale", &[outcome(lease)]).await })
    };
    until_a_record_waits_for_a_lock(pool).await;
    renewal.commit().await.expect("commit the renewal");

    assert_eq!(owner.await.expect("record task").expect("record"), vec![id]);
    written(pool).await
}
