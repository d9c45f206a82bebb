//! Two tenants, one key: every destination sees each intent under its delivery key, unique
//! across tenants, so a receiver that honours keys makes two effects and answers each tenant
//! with its own object; a lookup finds only its own tenant's effect; an exactly-once AMQP
//! consumer applies both messages and knows whose each is. And an intent written before
//! delivery keys carried the tenant is sent again under the key it was first sent under.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use oncebox_core::{IntentNames, NewIntent};
use serde_json::{Value, json};
use sqlx::Row;

use crate::broker::*;
use crate::env::*;
use crate::support::TestDb;

fn two_destinations(billing: &str, archive: &str) -> String {
    format!(
        r#"
[actions.create_invoice]
destination = "billing"

[actions.archive]
destination = "archive"

[destinations.billing]
kind = "http"
url = "{billing}"
idempotency = "key"
timeout = "1s"
reference_pointer = "/id"

[destinations.archive]
kind = "http"
url = "{archive}"
idempotency = "lookup"
timeout = "1s"
reference_pointer = "/id"
consistency_window = "30s"

[destinations.archive.lookup]
url = "{archive}?key={{key}}"
results_pointer = "/data"
fields = ["/amount"]
reference_pointer = "/id"
timeout = "1s"
"#
    )
}

/// (status, external reference) of `tenant`'s intent `key`.
async fn outcome(env: &Env, tenant: &str, key: &str) -> (String, Option<String>) {
    let row = sqlx::query(
        "SELECT status::text AS status, external_reference FROM oncebox.intents
         WHERE tenant_id = $1 AND idempotency_key = $2",
    )
    .bind(tenant)
    .bind(key)
    .fetch_one(&env.pool)
    .await
    .expect("intent");
    (row.get("status"), row.get("external_reference"))
}

#[tokio::test]
async fn two_tenants_with_one_key_get_two_effects_and_each_its_own_answer() {
    let billing = receiver(true).await;
    let archive = receiver(false).await;
    let env = Env::new("tenants", &two_destinations(&billing.url(), &archive.url())).await;
    for (tenant, amount) in [("t1", "100.00"), ("t2", "999.00")] {
        env.submit(NewIntent::new(
            IntentNames {
                tenant_id: tenant,
                idempotency_key: "invoice-o-1",
                action: "create_invoice",
            },
            json!({"amount": amount}),
        ))
        .await;
        // The archive executes and drops its answer: the outcome is looked up by key.
        env.submit(NewIntent::new(
            IntentNames {
                tenant_id: tenant,
                idempotency_key: "doc-1",
                action: "archive",
            },
            json!({"amount": amount, "faults": ["drop"]}),
        ))
        .await;
    }
    let worker = env.worker("w", &[], "5s");
    env.wait_until(Duration::from_secs(30), "every intent settled", || async {
        env.open().await == 0
    })
    .await;
    assert!(worker.stop().await.success());
    let expected = |key: &str| HashMap::from([(format!("t1:{key}"), 1), (format!("t2:{key}"), 1)]);
    assert_eq!(
        billing.effects(),
        expected("invoice-o-1"),
        "one effect per tenant"
    );
    assert_eq!(
        archive.effects(),
        expected("doc-1"),
        "one effect per tenant"
    );
    // Every request the billing system received executed: nothing was replayed to a tenant.
    let seen = billing.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|s| s.executed), "{seen:?}");
    for (tenant, amount) in [("t1", "100.00"), ("t2", "999.00")] {
        let body = seen
            .iter()
            .find(|s| s.key == format!("{tenant}:invoice-o-1"))
            .map(|s| s.body["amount"].clone());
        assert_eq!(body, Some(Value::from(amount)), "{tenant}'s own invoice");
        for key in ["invoice-o-1", "doc-1"] {
            assert_eq!(
                outcome(&env, tenant, key).await,
                ("succeeded".to_owned(), Some(format!("ref-{tenant}:{key}"))),
                "{tenant}'s {key} holds its own object"
            );
        }
    }
    let found: i64 = env
        .scalar("SELECT count(*) FROM oncebox.attempts WHERE outcome = 'lookup_found'")
        .await;
    assert_eq!(found, 2, "each archive outcome was found by its own lookup");
    env.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_with_one_key_over_amqp_are_two_messages_each_applied_once() {
    let _one_at_a_time = AMQP.lock().await;
    let name = format!("oncebox_w_amqp_tenants_{}", std::process::id());
    let queue = format!("{name}.invoices");
    declare_consumer_queue(&queue).await;
    let env = Env::new("amqp_tenants", &amqp_config("", &queue)).await;
    for (tenant, n) in [("t1", 1), ("t2", 2)] {
        env.submit(NewIntent::new(
            IntentNames {
                tenant_id: tenant,
                idempotency_key: "bus-1",
                action: "create_invoice",
            },
            json!({"n": n}),
        ))
        .await;
    }
    let (_inbox, stop_consumer, consumer) = start_consumer(&env, &queue, 5).await;
    let (worker, _) = dead_letter_worker(&env, "w", "10s");
    env.wait_until(Duration::from_secs(60), "both messages applied", || async {
        env.count("SELECT count(*) FROM received").await >= 2
    })
    .await;
    assert!(worker.stop().await.success());
    stop_consumer.cancel();
    consumer.await.expect("consumer");
    let rows: BTreeSet<(String, Option<String>, i64)> =
        sqlx::query("SELECT message_id, tenant, n FROM received")
            .fetch_all(&env.pool)
            .await
            .expect("received")
            .iter()
            .map(|r| (r.get("message_id"), r.get("tenant"), r.get("n")))
            .collect();
    assert_eq!(
        rows,
        BTreeSet::from([
            ("t1:bus-1".to_owned(), Some("t1".to_owned()), 1),
            ("t2:bus-1".to_owned(), Some("t2".to_owned()), 2),
        ]),
        "each tenant's message applied once, and the handler knew whose it was"
    );
    delete_queues(&[queue.clone(), format!("{queue}.dlq")]).await;
    env.drop_db().await;
}

/// The schema as the release before delivery keys left it: every migration up to 0020.
async fn migrate_to_the_previous_release(pool: &sqlx::PgPool) {
    let mut old = sqlx::migrate::Migrator::with_migrations(
        oncebox_store::MIGRATOR
            .iter()
            .filter(|m| m.version <= 20)
            .cloned()
            .collect(),
    );
    old.dangerous_set_table_name(oncebox_store::MIGRATIONS_TABLE);
    old.create_schema("oncebox");
    old.run(pool).await.expect("migrations up to 0020");
}

#[tokio::test]
async fn an_intent_sent_before_delivery_keys_is_sent_again_under_its_first_key() {
    let rx = receiver(true).await;
    let config = config(&rx.url(), "key", "");
    let db = TestDb::new("w", "upgrade_key", false).await;
    let pool = db.pool(4).await;
    migrate_to_the_previous_release(&pool).await;
    // The previous release's submit wrote the intent and its outbox row (it names no key form);
    // its worker claimed the row, sent it under the bare key and died without an answer.
    let arguments = json!({"amount": "100.00"});
    let hash = oncebox_core::request_hash("create_invoice", &arguments);
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload,
                                      status, redacted)
         VALUES ('t1', 'invoice-o-1', 'create_invoice', $1, $2, 'in_flight', false) RETURNING id",
    )
    .bind(&hash)
    .bind(&arguments)
    .fetch_one(&pool)
    .await
    .expect("the old submit");
    sqlx::query(
        "INSERT INTO oncebox.outbox (intent_id, phase, tenant_id, available_at, lease_owner,
                                     lease_expires_at, epoch, dispatched_at)
         VALUES ($1, 'deliver', 't1', now(), 'old-worker', now() - interval '1 second', 1, now())",
    )
    .bind(id)
    .execute(&pool)
    .await
    .expect("the old worker's claim");
    oncebox_delivery::install_crypto_provider();
    let first = reqwest::Client::new()
        .post(rx.url())
        .header("idempotency-key", "invoice-o-1")
        .json(&arguments)
        .send()
        .await
        .expect("the old worker's request");
    assert!(first.status().is_success());
    // The upgrade: this release's migrations, then its worker and its submits.
    oncebox_store::migrate(&pool).await.expect("migrate");
    let env = Env::with_db(db, pool, &config).await;
    env.intent("invoice-o-2", json!({"amount": "5.00"})).await;
    let worker = env.worker("w", &[], "5s");
    env.wait_until(Duration::from_secs(30), "both delivered", || async {
        env.open().await == 0
    })
    .await;
    assert!(worker.stop().await.success());
    let keys: Vec<String> = rx.seen().iter().map(|s| s.key.clone()).collect();
    assert_eq!(
        keys.iter().filter(|k| *k == "invoice-o-1").count(),
        2,
        "the re-send carries the key the first attempt carried: {keys:?}"
    );
    assert!(keys.contains(&"t1:invoice-o-2".to_owned()), "{keys:?}");
    assert_eq!(rx.total_effects(), 2, "{:?}", rx.effects());
    for (key, delivery_key) in [
        ("invoice-o-1", "invoice-o-1"),
        ("invoice-o-2", "t1:invoice-o-2"),
    ] {
        let (code, shown, stderr) = ops(&env, &["show", key, "--tenant", "t1"]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(shown["intent"]["delivery_key"], delivery_key, "{shown}");
        assert_eq!(shown["intent"]["status"], "succeeded", "{shown}");
    }
    env.drop_db().await;
}
