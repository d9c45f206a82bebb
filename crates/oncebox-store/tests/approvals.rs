//! Approvals in the store: an intent its action's policy matches is written awaiting_approval,
//! out of every claim's reach; four eyes (the submitter may not approve, one identity counts
//! once); the last approval queues it afresh; a rejection ends it; a replay does not ask again;
//! a head awaiting approval holds its lane.

use std::time::Duration;

use oncebox_core::config::Config;
use oncebox_core::{IntentNames, NewIntent, Status};
use oncebox_store::approvals::{self, Approved};
use oncebox_store::ops::{self, Actor, OpsError};
use oncebox_store::{Intake, Intent, Phase, claim, intent_by_key};
use serde_json::{Value, json};
use sqlx::PgPool;

/// Refunds of 1,000 or more (decimal strings or numbers) need two people.
const CONFIG: &str = r#"
[actions.refund]
destination = "billing"
[actions.refund.approval]
when = { type = "object", required = ["amount"], properties = { amount = { decimalMinimum = "1000" } } }
approvals = 2

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/refunds"
idempotency = "key"
"#;

fn intake() -> Intake {
    let config = Config::from_toml(CONFIG).expect("config");
    Intake::new(&config, None)
        .expect("no rule hashes")
        .with_notify(false)
}

fn refund(key: &str, amount: Value) -> NewIntent {
    NewIntent::new(
        IntentNames {
            tenant_id: "t",
            idempotency_key: key,
            action: "refund",
        },
        json!({ "amount": amount }),
    )
}

/// Submits `intent` through the API's path, as token `by`.
async fn submit_as(pool: &PgPool, intent: NewIntent, by: &str) -> (Intent, bool) {
    let mut conn = pool.acquire().await.expect("conn");
    let s = intake()
        .submit_alone_as(&mut conn, intent, by)
        .await
        .expect("submit");
    (s.intent, s.created)
}

fn token(id: u32, label: &str) -> Actor {
    Actor::new(format!("token {id}"), "ops", "api").with_label(Some(label))
}

async fn approve(pool: &PgPool, id: i64, actor: &Actor) -> Result<Approved, OpsError> {
    let mut tx = pool.begin().await.expect("begin");
    let done = approvals::approve(&mut tx, id, actor, Some("checked")).await;
    match &done {
        Ok(_) => tx.commit().await.expect("commit"),
        Err(_) => tx.rollback().await.expect("rollback"),
    }
    done
}

fn refused<T: std::fmt::Debug>(r: Result<T, OpsError>) -> String {
    match r {
        Err(OpsError::Refused(why)) => why,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Seconds from now to the deliver row's `available_at` of intent `id` (infinity: f64::MAX).
async fn queued_in(pool: &PgPool, id: i64) -> f64 {
    sqlx::query_scalar(
        "SELECT CASE WHEN available_at = 'infinity' THEN 'Infinity'::float8 \
         ELSE extract(epoch FROM available_at - now())::float8 END \
         FROM oncebox.outbox WHERE intent_id = $1 AND phase = 'deliver'",
    )
    .bind(id)
    .fetch_one(pool)
    .await
    .expect("deliver row")
}

/// The deliver rows a claim of worker `worker` takes now.
async fn claim_as(pool: &PgPool, worker: &str) -> Vec<oncebox_store::ClaimedRow> {
    let mut conn = pool.acquire().await.expect("conn");
    claim(
        &mut *conn,
        Phase::Deliver,
        worker,
        100,
        Duration::from_secs(30),
        &mut oncebox_store::TenantCursor::default(),
    )
    .await
    .expect("claim")
}

async fn claimable(pool: &PgPool) -> Vec<i64> {
    let rows = claim_as(pool, "w").await;
    rows.into_iter().map(|r| r.lease.intent_id).collect()
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_policy_decides_by_decimal_value_and_nothing_waiting_is_claimed(pool: PgPool) {
    let cases = [
        ("s-999.99", json!("999.99"), Status::Pending),
        ("s-1000", json!("1000"), Status::AwaitingApproval),
        ("s-1000.00", json!("1000.00"), Status::AwaitingApproval),
        ("n-5000", json!(5000), Status::AwaitingApproval),
        ("n-50", json!(50), Status::Pending),
        // Past a double's precision: still exact.
        ("s-big", json!("999.9999999999999999999"), Status::Pending),
    ];
    let mut waiting = Vec::new();
    for (key, amount, status) in cases {
        let (i, created) = submit_as(&pool, refund(key, amount), "token 1").await;
        assert!(created);
        assert_eq!(i.status, status, "{key}");
        let stored = intent_by_key(&pool, "t", key)
            .await
            .expect("read")
            .expect("there");
        assert_eq!(stored.status, status, "{key} as stored");
        if status == Status::AwaitingApproval {
            waiting.push(i.id);
            // Queued for the end of its window (a day, the default).
            assert!(queued_in(&pool, i.id).await > 86_000.0, "{key}");
        }
    }
    let claimed = claimable(&pool).await;
    assert_eq!(
        claimed.len(),
        3,
        "only the three without a wait: {claimed:?}"
    );
    assert!(claimed.iter().all(|id| !waiting.contains(id)));
}

#[sqlx::test(migrations = "../../migrations")]
async fn four_eyes_refuses_the_submitter_and_counts_each_person_once(pool: PgPool) {
    let (i, _) = submit_as(&pool, refund("r", json!("5000.00")), "token 1").await;
    // No operator's move skips the people: neither a retry nor a cancel.
    let mut tx = pool.begin().await.expect("begin");
    let why = refused(ops::retry(&mut tx, i.id, &token(2, "ana"), "push it").await);
    assert!(why.contains("it awaits approval"), "{why}");
    tx.rollback().await.expect("rollback");
    let mut tx = pool.begin().await.expect("begin");
    let why = refused(ops::cancel(&mut tx, i.id, &token(2, "ana"), None).await);
    assert!(why.contains("it awaits approval"), "{why}");
    tx.rollback().await.expect("rollback");
    let why = refused(approve(&pool, i.id, &token(1, "agent-bot")).await);
    assert!(
        why.contains("token 1 submitted intent r: someone else must approve it"),
        "{why}"
    );

    let first = approve(&pool, i.id, &token(2, "ana")).await.expect("first");
    assert_eq!((first.approvals, first.needed), (1, 2));
    assert!(!first.released());
    assert_eq!(first.intent.status, Status::AwaitingApproval);
    let why = refused(approve(&pool, i.id, &token(2, "ana")).await);
    assert!(why.contains("token 2 already approved intent r"), "{why}");
    assert!(why.contains("1 of 2"), "{why}");
    assert!(
        claimable(&pool).await.is_empty(),
        "one approval of two sends nothing"
    );

    let second = approve(&pool, i.id, &token(3, "bo")).await.expect("second");
    assert!(second.released());
    assert_eq!(
        (second.approvals, second.intent.status),
        (2, Status::Pending)
    );
    assert!(queued_in(&pool, i.id).await <= 0.0, "ready now");
    assert_eq!(claimable(&pool).await, [i.id]);

    let audit = ops::audit_log(&pool, Some("t"), Some("r"), 10)
        .await
        .expect("audit");
    let rows: Vec<(&str, Option<&str>, &str, Status)> = audit
        .iter()
        .map(|a| {
            (
                a.actor.as_str(),
                a.label.as_deref(),
                a.action.as_str(),
                a.status_after,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("token 3", Some("bo"), "approve", Status::Pending),
            ("token 2", Some("ana"), "approve", Status::AwaitingApproval),
        ]
    );
    assert!(audit.iter().all(|a| a.reason.as_deref() == Some("checked")));
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_replay_does_not_ask_again_and_a_rejection_is_final(pool: PgPool) {
    let (i, created) = submit_as(&pool, refund("r", json!(1200)), "token 1").await;
    assert!(created);
    let (again, created) = submit_as(&pool, refund("r", json!(1200)), "token 1").await;
    assert!(!created, "a replay");
    assert_eq!((again.id, again.status), (i.id, Status::AwaitingApproval));
    let rows: Vec<String> = sqlx::query_scalar("SELECT phase::text FROM oncebox.outbox ORDER BY 1")
        .fetch_all(&pool)
        .await
        .expect("rows");
    assert_eq!(
        rows,
        ["ask", "deliver"],
        "one deliver row and one approval request, however often it is submitted"
    );

    let mut tx = pool.begin().await.expect("begin");
    let done = approvals::reject(&mut tx, i.id, &token(2, "ana"), "duplicate refund")
        .await
        .expect("reject");
    tx.commit().await.expect("commit");
    assert_eq!(done.status, Status::Rejected);
    assert!(done.completed_at.is_some());
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(rows, 0, "nothing left to send");
    let why = refused(approve(&pool, i.id, &token(3, "bo")).await);
    assert!(why.contains("is rejected"), "{why}");
    let (replayed, created) = submit_as(&pool, refund("r", json!(1200)), "token 1").await;
    assert!(!created);
    assert_eq!(
        replayed.status,
        Status::Rejected,
        "a replay returns the decision"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_closed_window_refuses_approval(pool: PgPool) {
    let (i, _) = submit_as(&pool, refund("r", json!(1200)), "token 1").await;
    sqlx::query(
        "UPDATE oncebox.intents SET approval_expires_at = now() - interval '1 second' WHERE id = $1",
    )
    .bind(i.id)
    .execute(&pool)
    .await
    .expect("close the window");
    let why = refused(approve(&pool, i.id, &token(2, "ana")).await);
    assert!(why.contains("approval window closed"), "{why}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_head_awaiting_approval_holds_its_lane_until_decided(pool: PgPool) {
    let ordered = |key: &str, amount: Value| NewIntent {
        ordering_key: Some("customer-7".into()),
        ..refund(key, amount)
    };
    let (head, _) = submit_as(&pool, ordered("head", json!(2000)), "token 1").await;
    let (next, _) = submit_as(&pool, ordered("next", json!(10)), "token 1").await;
    let (big_next, _) = submit_as(&pool, ordered("big-next", json!(3000)), "token 1").await;
    assert_eq!(head.status, Status::AwaitingApproval);
    assert_eq!(next.status, Status::Pending);
    assert!(queued_in(&pool, head.id).await > 86_000.0);
    assert!(
        queued_in(&pool, next.id).await.is_infinite(),
        "parked behind the head"
    );
    assert!(
        claimable(&pool).await.is_empty(),
        "the lane waits for its head's people"
    );

    // Rejecting the head moves the lane on, as a cancel does.
    let mut tx = pool.begin().await.expect("begin");
    approvals::reject(&mut tx, head.id, &token(2, "ana"), "no")
        .await
        .expect("reject");
    tx.commit().await.expect("commit");
    assert!(
        queued_in(&pool, next.id).await <= 0.0,
        "the next one is ready"
    );
    assert!(queued_in(&pool, big_next.id).await.is_infinite());
    assert_eq!(claimable(&pool).await, [next.id]);

    // Approved while parked behind the head: it stays parked until its turn.
    approve(&pool, big_next.id, &token(2, "ana"))
        .await
        .expect("one");
    let done = approve(&pool, big_next.id, &token(3, "bo"))
        .await
        .expect("two");
    assert_eq!(done.intent.status, Status::Pending);
    assert!(
        queued_in(&pool, big_next.id).await.is_infinite(),
        "still behind its head"
    );
}

/// An intent's deadline shortens its approval window, on both submit statements (plain and
/// ordered): the window closes at the deadline when that comes first, else when the policy's
/// window (24 h here) ends — never later — and the deliver row is queued for that moment, when a
/// worker expires the intent unless the approvals came first.
#[sqlx::test(migrations = "../../migrations")]
async fn a_deadline_shortens_the_approval_window_on_both_submit_statements(pool: PgPool) {
    const DAY: f64 = 86_400.0;
    for lane in [None, Some("lane")] {
        for (name, deadline, closes_in) in [
            ("soon", Some(60.0), 60.0),
            ("later", Some(2.0 * DAY), DAY),
            ("none", None, DAY),
        ] {
            let key = format!("{name}-{}", lane.unwrap_or("plain"));
            let mut intent = refund(&key, json!("5000"));
            intent.deadline =
                deadline.map(|s| std::time::SystemTime::now() + Duration::from_secs_f64(s));
            // Each in a lane of its own, so that it is its lane's head.
            intent.ordering_key = lane.map(|l| format!("{l}-{name}"));
            let (written, _) = submit_as(&pool, intent, "token 1").await;
            assert_eq!(written.status, Status::AwaitingApproval, "{key}");
            let (window, queued): (f64, f64) = sqlx::query_as(
                "SELECT extract(epoch FROM i.approval_expires_at - now())::float8,
                        extract(epoch FROM o.available_at - now())::float8
                 FROM oncebox.intents i
                 JOIN oncebox.outbox o ON o.intent_id = i.id AND o.phase = 'deliver'
                 WHERE i.idempotency_key = $1",
            )
            .bind(&key)
            .fetch_one(&pool)
            .await
            .expect("the window");
            assert!(
                (window - closes_in).abs() < 5.0,
                "{key}: the window closes in {window} s, not {closes_in} s"
            );
            assert!(
                (queued - window).abs() < 0.001,
                "{key}: queued in {queued} s"
            );
        }
    }
}

/// An intent awaiting approval behind its lane's head is queued, when the head is released, for
/// the end of its approval window — not now, where a worker would claim it early (it would only
/// hold it back again). Were a worker to reach it early all the same, an approval while it holds
/// the row is refused with a word to try again, and goes through once the holder gave it back.
#[sqlx::test(migrations = "../../migrations")]
async fn behind_a_head_an_intent_awaiting_approval_waits_for_its_window_and_an_approval_wins(
    pool: PgPool,
) {
    let ordered = |key: &str, amount: Value| NewIntent {
        ordering_key: Some("customer-9".into()),
        ..refund(key, amount)
    };
    let (head, _) = submit_as(&pool, ordered("head", json!(10)), "token 1").await;
    let (big, _) = submit_as(&pool, ordered("big", json!(5000)), "token 1").await;
    assert_eq!(big.status, Status::AwaitingApproval);
    assert!(
        queued_in(&pool, big.id).await.is_infinite(),
        "parked behind the head"
    );
    assert_eq!(claimable(&pool).await, [head.id]);
    // The head succeeds (as a worker's record writes it): the lane moves on.
    sqlx::query(
        "UPDATE oncebox.intents SET status = 'succeeded', completed_at = now() WHERE id = $1",
    )
    .bind(head.id)
    .execute(&pool)
    .await
    .expect("the head succeeds");
    let queued = queued_in(&pool, big.id).await;
    assert!(
        (86_000.0..=86_400.0).contains(&queued),
        "queued for its window's end, not now: in {queued} s"
    );
    assert!(
        claimable(&pool).await.is_empty(),
        "no claim reaches it early"
    );

    // Had a worker reached it early all the same and held its row, an approval waits for it.
    sqlx::query(
        "UPDATE oncebox.outbox SET available_at = now() WHERE intent_id = $1 AND phase = 'deliver'",
    )
    .bind(big.id)
    .execute(&pool)
    .await
    .expect("early");
    let held = claim_as(&pool, "early-worker").await;
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].status, Status::AwaitingApproval);
    assert!(held[0].approval_secs_left.is_some_and(|s| s > 80_000.0));
    // While it holds the row, an approval is refused with a word to try again: the holder
    // would otherwise give the row back for its window's end after the approval released it.
    let busy = refused(approve(&pool, big.id, &token(2, "ana")).await);
    assert!(busy.contains("early-worker holds intent big"), "{busy}");
    // The holder gives it back until the window's end (fenced on its lease)…
    let deferred = oncebox_store::defer(
        &pool,
        "early-worker",
        Phase::Deliver,
        &[held[0].lease],
        &[Duration::from_secs(86_000)],
    )
    .await
    .expect("defer");
    assert_eq!(deferred, [big.id]);
    // …and the approvals then go through and queue it afresh, ready now.
    approve(&pool, big.id, &token(2, "ana")).await.expect("one");
    let done = approve(&pool, big.id, &token(3, "bo")).await.expect("two");
    assert_eq!(done.intent.status, Status::Pending);
    assert!(
        queued_in(&pool, big.id).await <= 0.0,
        "ready now, as approved"
    );
    assert_eq!(claimable(&pool).await, [big.id]);
}

/// Two people approving one intent at the same moment: both approvals count, the intent is
/// released once, with one deliver row and no ask row left.
#[sqlx::test(migrations = "../../migrations")]
async fn two_approvals_at_once_release_the_intent_once(pool: PgPool) {
    let (big, _) = submit_as(&pool, refund("both", json!(5000)), "token 1").await;
    let (a, b) = (token(2, "ana"), token(3, "bo"));
    let (first, second) = tokio::join!(approve(&pool, big.id, &a), approve(&pool, big.id, &b));
    let (first, second) = (first.expect("ana"), second.expect("bo"));
    let released = [&first, &second]
        .iter()
        .filter(|d| d.intent.status == Status::Pending)
        .count();
    assert_eq!(released, 1, "exactly one of them released it");
    let rows: Vec<(String, i64)> = sqlx::query_as(
        "SELECT phase::text, count(*) FROM oncebox.outbox WHERE intent_id = $1 GROUP BY phase",
    )
    .bind(big.id)
    .fetch_all(&pool)
    .await
    .expect("rows");
    assert_eq!(rows, [("deliver".to_owned(), 1)]);
    let approvals: i64 =
        sqlx::query_scalar("SELECT count(*) FROM oncebox.approvals WHERE intent_id = $1")
            .bind(big.id)
            .fetch_one(&pool)
            .await
            .expect("approvals");
    assert_eq!(approvals, 2);
    assert_eq!(claimable(&pool).await, [big.id]);
}
