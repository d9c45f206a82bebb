//! The transactional submit against the real Postgres; every test gets its own database.

use std::sync::Arc;

use oncebox_core::redact::{HashWith, RedactMode, RedactRule, RedactionKey, RedactionKeys, hashed};
use oncebox_core::{IntentNames, NewIntent};
use oncebox_store::{Intake, SubmitError, intent_by_key};
use serde_json::{Value, json};
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::{PgPool, Row};
use tokio::sync::Barrier;

fn key(id: &str) -> RedactionKey {
    RedactionKey::new(id, format!("secret of {id} ").repeat(4)).expect("key")
}

fn card_rules() -> Vec<RedactRule> {
    vec![
        RedactRule {
            pointer: "/card/number".into(),
            mode: RedactMode::Hash,
        },
        RedactRule {
            pointer: "/card/cvc".into(),
            mode: RedactMode::Drop,
        },
    ]
}

fn intake_with(keys: Option<RedactionKeys>) -> Intake {
    Intake::from_actions(
        [
            ("create_invoice".to_owned(), vec![]),
            ("charge_card".to_owned(), card_rules()),
        ],
        keys,
    )
    .expect("keys given")
}

fn intake() -> Intake {
    intake_with(Some(RedactionKeys::new(key("k1"), [])))
}

fn invoice(key: &str) -> NewIntent {
    NewIntent::new(
        IntentNames {
            tenant_id: "tenant-a",
            idempotency_key: key,
            action: "create_invoice",
        },
        json!({"order_id": "order-8172", "amount": "125.00"}),
    )
}

async fn counts(pool: &PgPool) -> (i64, i64) {
    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM oncebox.intents) AS i, (SELECT count(*) FROM oncebox.outbox) AS o",
    )
    .fetch_one(pool)
    .await
    .expect("count");
    (row.get("i"), row.get("o"))
}

async fn submit_committed(
    pool: &PgPool,
    intent: NewIntent,
) -> Result<oncebox_store::Submitted, SubmitError> {
    let mut tx = pool.begin().await.expect("begin");
    let r = intake().submit(&mut tx, intent).await;
    tx.commit().await.expect("commit");
    r
}

#[sqlx::test(migrations = "../../migrations")]
async fn thirty_two_concurrent_submits_make_one_intent(pool: PgPool) {
    let wide = PgPoolOptions::new()
        .max_connections(33)
        .connect_with((*pool.connect_options()).clone())
        .await
        .expect("pool");
    let barrier = Arc::new(Barrier::new(32));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (wide, barrier) = (wide.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut tx = wide.begin().await.expect("begin");
            barrier.wait().await;
            let s = intake()
                .submit(&mut tx, invoice("order-8172-invoice"))
                .await
                .expect("submit");
            tx.commit().await.expect("commit");
            (s.intent.id, s.created)
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.expect("task"));
    }
    assert_eq!(answers.len(), 32);
    let first = answers[0].0;
    assert!(answers.iter().all(|(id, _)| *id == first), "{answers:?}");
    assert_eq!(answers.iter().filter(|(_, created)| *created).count(), 1);
    assert_eq!(counts(&pool).await, (1, 1));
}

#[sqlx::test(migrations = "../../migrations")]
async fn replay_returns_the_same_intent(pool: PgPool) {
    let deadline =
        std::time::SystemTime::now() + std::time::Duration::from_nanos(3_600_000_000_123);
    let with_everything = NewIntent {
        business_ref: Some("order-8172".into()),
        run_id: Some("run-1".into()),
        step: Some("3".into()),
        deadline: Some(deadline),
        ..invoice("k1")
    };
    let first = submit_committed(&pool, with_everything.clone())
        .await
        .expect("first");
    assert!(first.created);
    assert_eq!(first.intent.status, oncebox_core::Status::Pending);
    // Same arguments written in another key order and number spelling: still a replay.
    let mut again = with_everything;
    again.arguments =
        serde_json::from_str(r#"{ "amount": "125.00", "order_id": "order-8172" }"#).expect("json");
    let second = submit_committed(&pool, again).await.expect("replay");
    assert!(!second.created);
    // The intent built from the insert equals the row read back on replay, field by field.
    assert_eq!(second.intent, first.intent);
    assert_eq!(first.intent.business_ref.as_deref(), Some("order-8172"));
    assert!(first.intent.deadline.is_some());
    assert_eq!(counts(&pool).await, (1, 1));
}

#[sqlx::test(migrations = "../../migrations")]
async fn same_key_other_arguments_is_a_conflict_and_writes_nothing(pool: PgPool) {
    let first = submit_committed(&pool, invoice("k1")).await.expect("first");
    let mut other = invoice("k1");
    other.arguments = json!({"order_id": "order-8172", "amount": "999.00"});
    let mut tx = pool.begin().await.expect("begin");
    let err = intake()
        .submit(&mut tx, other.clone())
        .await
        .expect_err("conflict");
    match &err {
        SubmitError::KeyConflict {
            idempotency_key,
            existing_id,
            existing_hash,
            submitted_hash,
        } => {
            assert_eq!(idempotency_key, "k1");
            assert_eq!(*existing_id, first.intent.id);
            assert_eq!(existing_hash, &first.intent.request_hash);
            assert_eq!(
                submitted_hash,
                &oncebox_core::request_hash("create_invoice", &other.arguments)
            );
            assert_ne!(existing_hash, submitted_hash);
        }
        e => panic!("expected a conflict, got {e:?}"),
    }
    assert_eq!(err.field(), Some("idempotency_key"));
    // The transaction is still usable and holds no write of ours.
    let mine: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox WHERE intent_id <> $1")
        .bind(first.intent.id)
        .fetch_one(&mut *tx)
        .await
        .expect("count in tx");
    assert_eq!(mine, 0);
    tx.commit().await.expect("commit");
    assert_eq!(counts(&pool).await, (1, 1));
    let stored = intent_by_key(&pool, "tenant-a", "k1")
        .await
        .expect("read")
        .expect("exists");
    assert_eq!(
        stored.payload,
        invoice("k1").arguments,
        "the first request is what stays"
    );

    // Another action under the same key is a conflict too.
    let mut other_action = invoice("k1");
    other_action.action = "charge_card".into();
    assert!(matches!(
        submit_committed(&pool, other_action).await,
        Err(SubmitError::KeyConflict { .. })
    ));
}

/// The caller's own table, and an open transaction holding its row (order-8172) and the intent
/// under `k1`, as an orchestrator writes them together.
async fn order_with_intent(pool: &PgPool) -> sqlx::Transaction<'static, sqlx::Postgres> {
    sqlx::query("CREATE TABLE orders (id text PRIMARY KEY, invoiced boolean NOT NULL)")
        .execute(pool)
        .await
        .expect("business table");
    let mut tx = pool.begin().await.expect("begin");
    sqlx::query("INSERT INTO orders VALUES ('order-8172', true)")
        .execute(&mut *tx)
        .await
        .expect("order");
    intake()
        .submit(&mut tx, invoice("k1"))
        .await
        .expect("submit");
    tx
}

#[sqlx::test(migrations = "../../migrations")]
async fn rolled_back_with_the_callers_write_leaves_nothing(pool: PgPool) {
    let tx = order_with_intent(&pool).await;
    tx.rollback().await.expect("rollback");
    assert_eq!(counts(&pool).await, (0, 0));
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(orders, 0);
}

#[sqlx::test(migrations = "../../migrations")]
async fn committed_with_the_callers_write_appears_all_at_once(pool: PgPool) {
    let visible = |pool: PgPool| async move {
        sqlx::query_scalar::<_, i64>(
            "SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM oncebox.intents)
                  + (SELECT count(*) FROM oncebox.outbox)",
        )
        .fetch_one(&pool)
        .await
        .expect("count")
    };
    let tx = order_with_intent(&pool).await;
    assert_eq!(
        visible(pool.clone()).await,
        0,
        "another session sees nothing before commit"
    );
    tx.commit().await.expect("commit");
    assert_eq!(
        visible(pool.clone()).await,
        3,
        "order, intent and outbox row together"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn tenants_use_the_same_key_independently(pool: PgPool) {
    let a = submit_committed(&pool, invoice("shared-key"))
        .await
        .expect("a");
    let mut b_intent = invoice("shared-key");
    b_intent.tenant_id = "tenant-b".into();
    b_intent.arguments = json!({"something": "else"});
    let b = submit_committed(&pool, b_intent).await.expect("b");
    assert!(a.created && b.created);
    assert_ne!(a.intent.id, b.intent.id);
    assert_eq!(b.intent.tenant_id, "tenant-b");
    assert_eq!(counts(&pool).await, (2, 2));
}

#[sqlx::test(migrations = "../../migrations")]
async fn bad_input_names_the_field_and_writes_nothing(pool: PgPool) {
    let cases: Vec<(NewIntent, &str)> = vec![
        (invoice("has space"), "idempotency_key"),
        (invoice(&"k".repeat(256)), "idempotency_key"),
        (invoice(""), "idempotency_key"),
        (
            NewIntent {
                arguments: json!(["not", "an", "object"]),
                ..invoice("k")
            },
            "arguments",
        ),
        (
            NewIntent {
                arguments: json!({"id": 18446744073709551615u64}),
                ..invoice("k")
            },
            "arguments/id",
        ),
        (
            NewIntent {
                action: "drop_database".into(),
                ..invoice("k")
            },
            "action",
        ),
        (
            NewIntent {
                tenant_id: "ten ant".into(),
                ..invoice("k")
            },
            "tenant_id",
        ),
        (
            NewIntent {
                ordering_key: Some(String::new()),
                ..invoice("k")
            },
            "ordering_key",
        ),
    ];
    for (intent, field) in cases {
        let err = submit_committed(&pool, intent.clone())
            .await
            .expect_err("refused");
        assert!(matches!(err, SubmitError::Invalid(_)), "{err:?}");
        assert_eq!(err.field(), Some(field), "{intent:?}: {err}");
        assert!(err.to_string().contains(field), "{err}");
    }
    let msg = submit_committed(
        &pool,
        NewIntent {
            action: "drop_database".into(),
            ..invoice("k")
        },
    )
    .await
    .expect_err("unknown action")
    .to_string();
    assert!(
        msg.contains("drop_database") && msg.contains("create_invoice"),
        "{msg}"
    );
    assert_eq!(counts(&pool).await, (0, 0));
}

#[sqlx::test(migrations = "../../migrations")]
async fn redaction_happens_before_the_journal_and_delivery_keeps_the_original(pool: PgPool) {
    let args = json!({"card": {"number": "4111111111111111", "cvc": "123"}, "amount": "10.00"});
    let s = submit_committed(
        &pool,
        NewIntent::new(
            IntentNames {
                tenant_id: "tenant-a",
                idempotency_key: "pay-1",
                action: "charge_card",
            },
            args.clone(),
        ),
    )
    .await
    .expect("submit");
    let redacted = json!({"card": {"number": hashed(&json!("4111111111111111"), HashWith::Key(&key("k1")))}, "amount": "10.00"});
    assert_eq!(s.intent.payload, redacted);
    // The hash covers the redacted arguments and a keyed digest of what was dropped.
    let dropped = hashed(&json!([["/card/cvc", "123"]]), HashWith::Key(&key("k1")));
    assert_eq!(
        s.intent.request_hash,
        oncebox_core::hash::request_hash_dropping("charge_card", &redacted, Some(&dropped))
    );
    let journal_text: String = sqlx::query_scalar("SELECT payload::text FROM oncebox.intents")
        .fetch_one(&pool)
        .await
        .expect("journal");
    assert!(
        !journal_text.contains("4111111111111111") && !journal_text.contains("123\""),
        "{journal_text}"
    );
    let outbox_args: Option<Value> = sqlx::query_scalar("SELECT arguments FROM oncebox.outbox")
        .fetch_one(&pool)
        .await
        .expect("outbox");
    assert_eq!(outbox_args, Some(args.clone()));

    // The same request again is the same intent. A different dropped field (cvc) is another
    // request — kept nowhere, yet part of its hash as a keyed digest — and so is another card.
    let replay = submit_committed(
        &pool,
        NewIntent::new(
            IntentNames {
                tenant_id: "tenant-a",
                idempotency_key: "pay-1",
                action: "charge_card",
            },
            args.clone(),
        ),
    )
    .await;
    assert!(!replay.expect("replay").created);
    let mut other_cvc = args.clone();
    other_cvc["card"]["cvc"] = json!("999");
    assert!(matches!(
        submit_committed(
            &pool,
            NewIntent::new(
                IntentNames {
                    tenant_id: "tenant-a",
                    idempotency_key: "pay-1",
                    action: "charge_card"
                },
                other_cvc
            )
        )
        .await,
        Err(SubmitError::KeyConflict { .. })
    ));
    let mut other_card = args;
    other_card["card"]["number"] = json!("5500000000000004");
    assert!(matches!(
        submit_committed(
            &pool,
            NewIntent::new(
                IntentNames {
                    tenant_id: "tenant-a",
                    idempotency_key: "pay-1",
                    action: "charge_card"
                },
                other_card
            )
        )
        .await,
        Err(SubmitError::KeyConflict { .. })
    ));

    // Without redaction the outbox carries no copy of the arguments.
    submit_committed(&pool, invoice("plain"))
        .await
        .expect("plain");
    let copies: i64 =
        sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox WHERE arguments IS NOT NULL")
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(copies, 1);
}

#[sqlx::test(migrations = "../../migrations")]
async fn waiting_workers_are_notified_at_commit_and_not_on_rollback(pool: PgPool) {
    let mut listener = PgListener::connect_with(&pool).await.expect("listener");
    listener
        .listen(oncebox_store::OUTBOX_CHANNEL)
        .await
        .expect("listen");
    oncebox_store::register_waiting(&pool, "w1")
        .await
        .expect("register");

    let mut tx = pool.begin().await.expect("begin");
    intake()
        .submit(&mut tx, invoice("rolled-back"))
        .await
        .expect("submit");
    tx.rollback().await.expect("rollback");
    submit_committed(&pool, invoice("committed"))
        .await
        .expect("submit");
    // A replay inserts nothing and must not wake anyone.
    submit_committed(&pool, invoice("committed"))
        .await
        .expect("replay");
    submit_committed(&pool, invoice("second"))
        .await
        .expect("submit");

    sentinel(&pool).await;

    // Notifications arrive in commit order: the rolled-back one never, the replay never.
    let mut got = Vec::new();
    for _ in 0..3 {
        let n = listener.recv().await.expect("notification");
        got.push(n.payload().to_owned());
    }
    assert_eq!(got, ["deliver", "deliver", "sentinel"]);
}

/// Sends a last notification on the channel: whatever arrives before it was sent before it.
async fn sentinel(pool: &PgPool) {
    sqlx::query("SELECT pg_notify($1, 'sentinel')")
        .bind(oncebox_store::OUTBOX_CHANNEL)
        .execute(pool)
        .await
        .expect("sentinel");
}

#[sqlx::test(migrations = "../../migrations")]
async fn no_notify_when_no_worker_waits_or_notify_is_off(pool: PgPool) {
    let mut listener = PgListener::connect_with(&pool).await.expect("listener");
    listener
        .listen(oncebox_store::OUTBOX_CHANNEL)
        .await
        .expect("listen");
    let mut conn = pool.acquire().await.expect("conn");

    // Nobody waiting: a busy pool polls, so nobody is notified.
    submit_committed(&pool, invoice("nobody-waits"))
        .await
        .expect("submit");
    // A waiting worker, but this intake never notifies.
    oncebox_store::register_waiting(&mut *conn, "w1")
        .await
        .expect("register");
    let mut tx = pool.begin().await.expect("begin");
    intake()
        .with_notify(false)
        .submit(&mut tx, invoice("quiet"))
        .await
        .expect("submit");
    tx.commit().await.expect("commit");
    // The worker found work and deregistered.
    oncebox_store::deregister_waiting(&mut *conn, "w1")
        .await
        .expect("deregister");
    submit_committed(&pool, invoice("after-deregister"))
        .await
        .expect("submit");
    // A registration from a worker that crashed long ago does not count.
    sqlx::query(
        "INSERT INTO oncebox.waiting_workers VALUES ('dead', now() - interval '5 minutes')",
    )
    .execute(&mut *conn)
    .await
    .expect("stale");
    submit_committed(&pool, invoice("stale-waiter"))
        .await
        .expect("submit");
    // A live one does.
    oncebox_store::register_waiting(&mut *conn, "w2")
        .await
        .expect("register");
    submit_committed(&pool, invoice("woken"))
        .await
        .expect("submit");
    sentinel(&pool).await;

    let first = listener.recv().await.expect("notification");
    assert_eq!(first.payload(), "deliver", "only the last submit notifies");
    let second = listener.recv().await.expect("notification");
    assert_eq!(
        second.payload(),
        "sentinel",
        "nothing else notified before the sentinel"
    );
    assert_eq!(counts(&pool).await, (5, 5));
}

/// Keys rotate: an intent recorded under an older key is still recognised when its request is
/// replayed after the rotation (while the older key is kept), and so is one recorded with the
/// unkeyed hash of earlier versions; once the older key is dropped, its replay is a conflict.
#[sqlx::test(migrations = "../../migrations")]
async fn a_replay_across_a_key_rotation_is_still_a_replay(pool: PgPool) {
    let card = json!({"card": {"number": "4111111111111111"}, "amount": "10.00"});
    let submit = |intake: Intake, key: &'static str| {
        let (pool, card) = (pool.clone(), card.clone());
        async move {
            let mut tx = pool.begin().await.expect("begin");
            let r = intake
                .submit(
                    &mut tx,
                    NewIntent::new(
                        IntentNames {
                            tenant_id: "t",
                            idempotency_key: key,
                            action: "charge_card",
                        },
                        card,
                    ),
                )
                .await;
            tx.commit().await.expect("commit");
            r
        }
    };
    let first = submit(intake(), "pay").await.expect("under k1");
    assert!(first.created);
    let rotated = || intake_with(Some(RedactionKeys::new(key("k2"), [key("k1")])));
    let replay = submit(rotated(), "pay")
        .await
        .expect("a replay under k2 with k1 kept");
    assert!(!replay.created);
    assert_eq!(replay.intent.id, first.intent.id);
    // A new intent is hashed with the current key.
    let new = submit(rotated(), "pay-2").await.expect("new");
    assert!(
        new.intent.payload["card"]["number"]
            .as_str()
            .is_some_and(|v| v.starts_with("hmac-sha256:k2:")),
        "{}",
        new.intent.payload
    );
    let only_k2 = intake_with(Some(RedactionKeys::new(key("k2"), [])));
    assert!(matches!(
        submit(only_k2, "pay").await,
        Err(SubmitError::KeyConflict { .. })
    ));

    // An intent recorded before keys existed (the unkeyed "sha256:" form).
    let legacy = json!({"card": {"number": hashed(&json!("4111111111111111"), HashWith::LegacySha256)}, "amount": "10.00"});
    sqlx::query(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload, redacted) \
         VALUES ('t', 'old', 'charge_card', $1, $2, true)",
    )
    .bind(oncebox_core::request_hash("charge_card", &legacy))
    .bind(&legacy)
    .execute(&pool)
    .await
    .expect("an old intent");
    let replay = submit(rotated(), "old")
        .await
        .expect("the old intent's replay");
    assert!(!replay.created);
}

#[test]
fn a_hash_rule_without_a_key_is_refused_at_construction() {
    let e =
        Intake::from_actions([("charge_card".to_owned(), card_rules())], None).expect_err("no key");
    assert_eq!(
        (e.action.as_str(), e.pointer.as_str()),
        ("charge_card", "/card/number")
    );
    assert!(e.to_string().contains("ONCEBOX_REDACTION_KEYS"), "{e}");
}
