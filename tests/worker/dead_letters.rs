//! Dead letters: published to RabbitMQ with confirms, surviving an outage, once each.

use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::broker::*;
use crate::env::*;

#[tokio::test]
async fn two_effects_found_need_review_and_one_dead_letter_reaches_its_queue() {
    let _one_at_a_time = AMQP.lock().await;
    let rx = receiver(false).await;
    let env = Env::new("ambiguous", &reconcile_config(&rx, "30s")).await;
    env.intent("twice", json!({"n": 2, "faults": ["double"]}))
        .await;
    let (worker, exchange) = dead_letter_worker(&env, "w", "5s");
    env.wait_status("twice", "needs_review").await;
    // The notify row is deleted only after the broker confirmed the routed message.
    wait_dead_letters_published(&env, Duration::from_secs(20)).await;
    assert!(worker.stop().await.success());
    assert_eq!(
        reports(&env, "twice").await,
        ["unknown", "lookup_ambiguous"]
    );
    let messages = drain_queue(&format!("{exchange}.needs_review")).await;
    assert_eq!(messages.len(), 1, "exactly one message: {messages:?}");
    let (id, body) = &messages[0];
    assert_eq!(id, "dlq:t1:twice");
    assert_eq!(body["status"], "needs_review");
    assert_eq!(body["tenant"], "t1");
    assert_eq!(body["last_error"]["code"], "lookup_ambiguous");
    assert!(drain_queue(&format!("{exchange}.failed")).await.is_empty());
    let outbox = env.count("SELECT count(*) FROM oncebox.outbox").await;
    assert_eq!(outbox, 0);
    assert_eq!(rx.seen().len(), 1, "never re-sent");
    delete_exchange(&exchange).await;
    env.drop_db().await;
}

#[tokio::test]
async fn dead_letters_wait_out_a_rabbitmq_outage_and_arrive_once_each() {
    let _one_at_a_time = AMQP.lock().await;
    let rx = receiver(false).await;
    let env = Env::new("outage", &config(&rx.url(), "key", "")).await;
    let (worker, exchange) = dead_letter_worker(&env, "w", "5s");
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
        env.intent(format!("refused-{i}"), json!({"faults": ["400"]}))
            .await;
    }
    env.wait_count(
        "SELECT count(*) FROM oncebox.intents WHERE status = 'failed'",
        5,
    )
    .await;
    // While the broker is down the notifications wait, and publishing is being retried.
    env.wait_count(
        "SELECT count(*) FROM oncebox.outbox WHERE phase = 'notify' AND attempt > 0",
        1,
    )
    .await;
    assert_eq!(
        notify_rows(&env).await,
        5,
        "nothing is lost while RabbitMQ is down"
    );
    drop(back_up); // starts the broker again
    wait_dead_letters_published(&env, Duration::from_secs(60)).await;
    assert!(worker.stop().await.success());
    let messages = drain_queue(&format!("{exchange}.failed")).await;
    let mut ids: Vec<String> = messages.iter().map(|(id, _)| id.clone()).collect();
    ids.sort();
    assert_eq!(
        ids,
        (0..5)
            .map(|i| format!("dlq:t1:refused-{i}"))
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
    env.intent("lost-letter", json!({"n": 1})).await;
    let (worker, exchange) = dead_letter_worker(&env, "w", "10s");
    env.wait_status("lost-letter", "failed").await;
    wait_dead_letters_published(&env, Duration::from_secs(20)).await;
    assert!(worker.stop().await.success());
    let error: Value = env.scalar("SELECT last_error FROM oncebox.intents").await;
    assert_eq!(error["code"], "unroutable");
    let letters = drain_queue(&format!("{exchange}.failed")).await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].0, "dlq:t1:lost-letter");
    delete_exchange(&exchange).await;
    env.drop_db().await;
}
