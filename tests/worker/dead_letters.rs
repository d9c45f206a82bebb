//! Dead letters: published to RabbitMQ with confirms, surviving an outage, once each.

use std::process::Command;
use std::time::Duration;

use oncebox_core::NewIntent;
use oncebox_receiver::{Receiver, ReceiverConfig};
use serde_json::{Value, json};

use crate::broker::*;
use crate::env::*;

#[tokio::test]
async fn two_effects_found_need_review_and_one_dead_letter_reaches_its_queue() {
    let _one_at_a_time = AMQP.lock().await;
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("ambiguous", &reconcile_config(&rx, "30s")).await;
    let exchange = format!("{}.dead-letter", env.name());
    env.submit(NewIntent::new(
        "t1",
        "twice",
        "create_invoice",
        json!({"n": 2, "faults": ["double"]}),
    ))
    .await;
    let url = amqp_url();
    let worker = env.worker_with(
        "w",
        &[],
        "5s",
        &["--amqp-url", &url, "--dead-letter-exchange", &exchange],
    );
    env.wait_until(Duration::from_secs(20), "needs_review", || async {
        env.status_of("twice").await == "needs_review"
    })
    .await;
    // The notify row is deleted only after the broker confirmed the routed message.
    env.wait_until(
        Duration::from_secs(20),
        "the dead letter to be published",
        || async { notify_rows(&env).await == 0 },
    )
    .await;
    assert!(worker.stop().await.success());
    assert_eq!(
        reports(&env, "twice").await,
        ["unknown", "lookup_ambiguous"]
    );
    let messages = drain_queue(&format!("{exchange}.needs_review")).await;
    assert_eq!(messages.len(), 1, "exactly one message: {messages:?}");
    let (id, body) = &messages[0];
    assert_eq!(id, "dlq:twice");
    assert_eq!(body["status"], "needs_review");
    assert_eq!(body["tenant"], "t1");
    assert_eq!(body["last_error"]["code"], "lookup_ambiguous");
    assert!(drain_queue(&format!("{exchange}.failed")).await.is_empty());
    let outbox: i64 = sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox")
        .fetch_one(&env.pool)
        .await
        .expect("n");
    assert_eq!(outbox, 0);
    assert_eq!(rx.seen().len(), 1, "never re-sent");
    delete_exchange(&exchange).await;
    env.drop_db().await;
}

#[tokio::test]
async fn dead_letters_wait_out_a_rabbitmq_outage_and_arrive_once_each() {
    let _one_at_a_time = AMQP.lock().await;
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let env = Env::new("outage", &config(&rx.url(), "key", "")).await;
    let exchange = format!("{}.dead-letter", env.name());
    let url = amqp_url();
    let worker = env.worker_with(
        "w",
        &[],
        "5s",
        &["--amqp-url", &url, "--dead-letter-exchange", &exchange],
    );
    // Let the publisher connect and declare its queues, then take the broker away.
    env.wait_until(
        Duration::from_secs(10),
        "the dead-letter queues",
        || async {
            Command::new("rabbitmqctl")
                .args(["list_queues", "name"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains(&format!("{exchange}.failed")))
                .unwrap_or(false)
        },
    )
    .await;
    let back_up = BrokerBackUp;
    rabbitmqctl("stop_app");
    for i in 0..5 {
        env.submit(NewIntent::new(
            "t1",
            format!("refused-{i}"),
            "create_invoice",
            json!({"faults": ["400"]}),
        ))
        .await;
    }
    env.wait_until(Duration::from_secs(20), "five failed intents", || async {
        env.status_counts().await.get("failed") == Some(&5)
    })
    .await;
    // While the broker is down the notifications wait, and publishing is being retried.
    env.wait_until(
        Duration::from_secs(20),
        "a failed publish attempt",
        || async {
            let retried: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM oncebox.outbox WHERE phase = 'notify' AND attempt > 0",
            )
            .fetch_one(&env.pool)
            .await
            .expect("n");
            retried > 0
        },
    )
    .await;
    assert_eq!(
        notify_rows(&env).await,
        5,
        "nothing is lost while RabbitMQ is down"
    );
    drop(back_up); // starts the broker again
    env.wait_until(
        Duration::from_secs(60),
        "every dead letter published",
        || async { notify_rows(&env).await == 0 },
    )
    .await;
    assert!(worker.stop().await.success());
    let messages = drain_queue(&format!("{exchange}.failed")).await;
    let mut ids: Vec<String> = messages.iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    assert_eq!(
        ids,
        (0..5)
            .map(|i| format!("dlq:refused-{i}"))
            .collect::<Vec<_>>(),
        "each once"
    );
    delete_exchange(&exchange).await;
    env.drop_db().await;
}

#[tokio::test]
async fn unroutable_with_mandatory_fails_and_is_dead_lettered() {
    let _one_at_a_time = AMQP.lock().await;
    let env = Env::new("unroutable", &amqp_config("amq.direct", "nowhere-at-all")).await;
    let exchange = format!("{}.dead-letter", env.name());
    env.submit(NewIntent::new(
        "t1",
        "lost-letter",
        "create_invoice",
        json!({"n": 1}),
    ))
    .await;
    let url = amqp_url();
    let worker = env.worker_with(
        "w",
        &[],
        "10s",
        &["--amqp-url", &url, "--dead-letter-exchange", &exchange],
    );
    env.wait_until(Duration::from_secs(20), "failed", || async {
        env.status_of("lost-letter").await == "failed"
    })
    .await;
    env.wait_until(Duration::from_secs(20), "dead letter published", || async {
        notify_rows(&env).await == 0
    })
    .await;
    assert!(worker.stop().await.success());
    let error: Value = sqlx::query_scalar("SELECT last_error FROM oncebox.intents")
        .fetch_one(&env.pool)
        .await
        .expect("error");
    assert_eq!(error["code"], "unroutable");
    let letters = drain_queue(&format!("{exchange}.failed")).await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].0, "dlq:lost-letter");
    delete_exchange(&exchange).await;
    env.drop_db().await;
}
