//! AMQP destinations and the exactly-once inbox consumer, across forced connection closes.

use std::process::{Command, Stdio};
use std::time::Duration;

use oncebox_core::{IntentNames, NewIntent};
use serde_json::json;

use crate::broker::*;
use crate::env::*;
use crate::support::{Proc, run_ok};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_intents_over_amqp_are_applied_exactly_once_across_connection_drops() {
    const N: i64 = 5_000;
    let _one_at_a_time = AMQP.lock().await;
    let name = format!("oncebox_w_amqp5k_{}", std::process::id());
    let queue = format!("{name}.invoices");
    declare_consumer_queue(&queue).await;
    let env = Env::new("amqp5k", &amqp_config("", &queue)).await;
    {
        let mut tx = env.pool.begin().await.expect("begin");
        for i in 0..N {
            env.intake
                .submit(
                    &mut tx,
                    NewIntent::new(
                        IntentNames {
                            tenant_id: "t1",
                            idempotency_key: &format!("bus-{i}"),
                            action: "create_invoice",
                        },
                        json!({"n": i}),
                    ),
                )
                .await
                .expect("submit");
        }
        tx.commit().await.expect("commit");
    }
    let (inbox, stop_consumer, consumer) = start_consumer(&env, &queue, 5).await;
    let workers: Vec<Proc> = (0..2)
        .map(|w| dead_letter_worker(&env, &format!("w{w}"), "10s").0)
        .collect();
    let applied = || async {
        env.count("SELECT count(DISTINCT message_id) FROM received")
            .await
    };
    // Force every connection closed twice while messages flow.
    for threshold in [N / 4, N * 3 / 4] {
        env.wait_until(Duration::from_secs(120), "progress", || async {
            applied().await >= threshold
        })
        .await;
        let closed = Command::new("rabbitmqctl")
            .args(["close_all_connections", "oncebox test: forced close"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("rabbitmqctl");
        assert!(closed.success());
    }
    env.wait_until(
        Duration::from_secs(180),
        "every message applied",
        || async { applied().await == N },
    )
    .await;
    env.wait_until(
        Duration::from_secs(60),
        "every intent succeeded",
        || async { env.status_counts().await.get("succeeded") == Some(&N) },
    )
    .await;
    for w in workers {
        assert!(w.stop().await.success());
    }
    // Let the consumer drain whatever duplicates are still queued — ready, or delivered to it
    // and not yet acked (a passive declare counts only the ready ones) — then stop it.
    env.wait_until(Duration::from_secs(30), "the queue to drain", || async {
        queue_messages(&queue) == Some(0)
    })
    .await;
    stop_consumer.cancel();
    consumer.await.expect("consumer");
    let rows = env.count("SELECT count(*) FROM received").await;
    let c = &inbox.counters;
    let (dups, redelivered) = (
        c.duplicates.load(std::sync::atomic::Ordering::Relaxed),
        c.redelivered.load(std::sync::atomic::Ordering::Relaxed),
    );
    let attempts = env.count("SELECT count(*) FROM oncebox.attempts").await;
    println!(
        "amqp: {N} intents, {attempts} publish attempts, {redelivered} redeliveries seen, {dups} duplicates filtered by the inbox"
    );
    assert!(
        redelivered > 0,
        "closing the consumer's connection mid-flow requeues what it held unacked: the broker redelivers it"
    );
    assert_eq!(
        rows, N,
        "the business table holds exactly one row per intent"
    );
    delete_queues(&[queue.clone(), format!("{queue}.dlq")]).await;
    env.drop_db().await;
}

#[tokio::test]
async fn a_poison_message_ends_in_the_consumer_queues_dead_letter_queue() {
    let _one_at_a_time = AMQP.lock().await;
    let name = format!("oncebox_w_poison_{}", std::process::id());
    let queue = format!("{name}.invoices");
    declare_consumer_queue(&queue).await;
    let env = Env::new("poison", &amqp_config("", &queue)).await;
    env.intent("good", json!({"n": 1})).await;
    env.intent("poison", json!({"n": 2, "poison": true})).await;
    let (inbox, stop_consumer, consumer) = start_consumer(&env, &queue, 3).await;
    let (worker, _exchange) = dead_letter_worker(&env, "w", "10s");
    env.wait_until(
        Duration::from_secs(30),
        "the poison message rejected",
        || async {
            inbox
                .counters
                .rejected
                .load(std::sync::atomic::Ordering::Relaxed)
                == 1
        },
    )
    .await;
    assert!(worker.stop().await.success());
    stop_consumer.cancel();
    consumer.await.expect("consumer");
    let dead = drain_queue(&format!("{queue}.dlq")).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].0, "t1:poison");
    let failures: i32 = env
        .scalar("SELECT count FROM oncebox_inbox.failures WHERE message_id = 't1:poison'")
        .await;
    assert_eq!(failures, 3, "rejected after 3 tries");
    let rows: Vec<String> = sqlx::query_scalar("SELECT message_id FROM received")
        .fetch_all(&env.pool)
        .await
        .expect("rows");
    assert_eq!(rows, [dk("good")]);
    delete_queues(&[queue.clone(), format!("{queue}.dlq")]).await;
    env.drop_db().await;
}

#[tokio::test]
async fn rabbitmq_definitions_load_and_match_what_workers_declare() {
    let _one_at_a_time = AMQP.lock().await;
    // Start from a clean slate for the default names: the import keeps an existing queue as it
    // is, whatever its type.
    for reason in oncebox_worker::reasons() {
        let _ = Command::new("rabbitmqctl")
            .args(["delete_queue", &format!("oncebox.dead-letter.{reason}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/rabbitmq/definitions.json"
    );
    run_ok(Command::new("rabbitmqctl").args(["import_definitions", file]));
    let listed = Command::new("rabbitmqctl")
        .args(["list_queues", "name", "type", "policy"])
        .output()
        .expect("list");
    let listed = String::from_utf8_lossy(&listed.stdout);
    for q in [
        "oncebox.dead-letter.failed",
        "oncebox.dead-letter.expired",
        "oncebox.dead-letter.needs_review",
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with(q) && l.contains("quorum")),
            "{q} missing:\n{listed}"
        );
    }
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("oncebox.consumer.invoices\t")
                && l.contains("oncebox-consumer-dead-letters")),
        "policy not applied:\n{listed}"
    );
    // A worker's own declaration of the same topology is accepted (same queue type).
    oncebox_worker::connect_dead_letters(&amqp_url(), "oncebox.dead-letter")
        .await
        .expect("equivalent declaration");
}
