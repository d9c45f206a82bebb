//! RabbitMQ helpers of the worker tests: the lock that runs broker tests one at a time, queues
//! and exchanges of a test's own, and an inbox consumer writing to the test's database.

use std::process::{Command, Stdio};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::env::Env;
use crate::support::Proc;

/// A worker publishing dead letters to an exchange of the test's own; the exchange's name.
pub(crate) fn dead_letter_worker(env: &Env, id: &str, lease: &str) -> (Proc, String) {
    let exchange = format!("{}.dead-letter", env.name());
    let url = amqp_url();
    let worker = env.worker_with(
        id,
        &[],
        lease,
        &["--amqp-url", &url, "--dead-letter-exchange", &exchange],
    );
    (worker, exchange)
}

/// Tests that use RabbitMQ run one at a time: one of them stops the broker.
pub(crate) static AMQP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub(crate) fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// Reads every message waiting in `queue` (no ack needed: they are taken).
pub(crate) async fn drain_queue(queue: &str) -> Vec<(String, Value)> {
    use lapin::options::BasicGetOptions;
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    let mut out = Vec::new();
    while let Some(m) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic_get")
    {
        let id = m
            .delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default();
        out.push((
            id,
            serde_json::from_slice(&m.delivery.data).expect("json body"),
        ));
    }
    let _ = conn.close(200, "done".into()).await;
    out
}

pub(crate) async fn delete_exchange(exchange: &str) {
    use lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    for reason in oncebox_worker::reasons() {
        let _ = channel
            .queue_delete(
                format!("{exchange}.{reason}").as_str().into(),
                QueueDeleteOptions::default(),
            )
            .await;
    }
    let _ = channel
        .exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
        .await;
    let _ = conn.close(200, "done".into()).await;
}

/// Waits (at most `limit`) until every dead letter is published: their notify rows are deleted
/// only after the broker confirmed the routed message.
pub(crate) async fn wait_dead_letters_published(env: &Env, limit: std::time::Duration) {
    env.wait_until(limit, "every dead letter published", || async {
        notify_rows(env).await == 0
    })
    .await;
}

pub(crate) async fn notify_rows(env: &Env) -> i64 {
    env.count("SELECT count(*) FROM oncebox.outbox WHERE phase = 'notify'")
        .await
}

/// Starts the RabbitMQ app again when dropped, so a failing outage test never leaves the broker
/// down for the tests after it.
pub(crate) struct BrokerBackUp;

impl Drop for BrokerBackUp {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .arg("start_app")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub(crate) fn rabbitmqctl(cmd: &str) {
    let ok = Command::new("rabbitmqctl")
        .arg(cmd)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("rabbitmqctl");
    assert!(ok.success(), "rabbitmqctl {cmd}");
}

pub(crate) fn amqp_config(exchange: &str, routing_key: &str) -> String {
    format!(
        r#"
[actions.create_invoice]
destination = "bus"

[destinations.bus]
kind = "amqp"
exchange = "{exchange}"
routing_key = "{routing_key}"
idempotency = "key"
timeout = "3s"

[destinations.bus.retry]
max_attempts = 30
initial_delay = "50ms"
max_delay = "500ms"
"#
    )
}

/// Declares `queue` (durable) whose rejected messages go to `queue.dlq`.
pub(crate) async fn declare_consumer_queue(queue: &str) {
    use lapin::options::QueueDeclareOptions;
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    let dlq = format!("{queue}.dlq");
    channel
        .queue_declare(
            dlq.as_str().into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await
        .expect("dlq");
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-dead-letter-exchange"),
        AMQPValue::LongString(LongString::from("")),
    );
    args.insert(
        ShortString::from("x-dead-letter-routing-key"),
        AMQPValue::LongString(LongString::from(dlq)),
    );
    channel
        .queue_declare(queue.into(), QueueDeclareOptions::durable(), args)
        .await
        .expect("queue");
    let _ = conn.close(200, "done".into()).await;
}

pub(crate) async fn delete_queues(names: &[String]) {
    use lapin::options::QueueDeleteOptions;
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("amqp");
    let channel = conn.create_channel().await.expect("channel");
    for n in names {
        let _ = channel
            .queue_delete(n.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = conn.close(200, "done".into()).await;
}

/// The consumer's business write: one row per message applied (no unique key on purpose, so a
/// double application would show as an extra row). Fails for messages marked poison.
pub(crate) fn apply_received<'c>(
    conn: &'c mut sqlx::PgConnection,
    d: &'c lapin::message::Delivery,
) -> oncebox_inbox::HandlerFuture<'c, String> {
    let id = d.properties.message_id().as_ref().map(|s| s.to_string());
    let tenant = oncebox_inbox::tenant(d);
    let body: Value = serde_json::from_slice(&d.data).unwrap_or(Value::Null);
    Box::pin(async move {
        if body["poison"] == true {
            return Err("cannot apply a poison message".to_owned());
        }
        sqlx::query("INSERT INTO received (message_id, n, tenant) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(body["n"].as_i64())
            .bind(tenant)
            .execute(conn)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
}

pub(crate) async fn start_consumer(
    env: &Env,
    queue: &str,
    max_deliveries: u32,
) -> (
    oncebox_inbox::Inbox,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    sqlx::query("CREATE TABLE IF NOT EXISTS received (message_id text, n bigint, tenant text)")
        .execute(&env.pool)
        .await
        .expect("table");
    let inbox = oncebox_inbox::Inbox::new(env.pool.clone(), "test-consumer", max_deliveries);
    let cancel = CancellationToken::new();
    let (i, c, q, url) = (inbox.clone(), cancel.clone(), queue.to_owned(), amqp_url());
    let task = tokio::spawn(async move { i.run(&url, &q, 50, apply_received, c).await });
    (inbox, cancel, task)
}

/// Messages in `queue`, ready and delivered-but-unacked together (`rabbitmqctl list_queues
/// name messages`); `None` when the queue is not listed.
pub(crate) fn queue_messages(queue: &str) -> Option<u64> {
    let out = Command::new("rabbitmqctl")
        .args(["list_queues", "-q", "name", "messages"])
        .output()
        .expect("rabbitmqctl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .find(|(name, _)| *name == queue)
        .and_then(|(_, n)| n.trim().parse().ok())
}
