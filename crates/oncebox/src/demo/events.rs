//! The demo's third destination: events published over RabbitMQ to a scratch queue and applied
//! exactly once by an `oncebox-inbox` consumer.

use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Channel, Connection, ConnectionProperties};
use oncebox_inbox::HandlerFuture;

use super::queries;

/// An unused queue is deleted by the broker after this long (milliseconds): whatever way the
/// demo ends, its queue does not outlive it for long.
const QUEUE_EXPIRES_MS: i64 = 120_000;

/// Runs `f` on a fresh channel, then closes the channel and the connection in that order.
async fn with_channel<T>(
    url: &str,
    f: impl AsyncFnOnce(&Channel) -> Result<T, lapin::Error>,
) -> Result<T, lapin::Error> {
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    let result = f(&channel).await;
    channel.close(200, "done".into()).await?;
    conn.close(200, "done".into()).await?;
    result
}

/// Declares the events queue (durable, deleted by the broker once unused for two minutes).
pub(super) async fn declare_queue(url: &str, queue: &str) -> Result<(), lapin::Error> {
    let mut args = FieldTable::default();
    args.insert(
        ShortString::from("x-expires"),
        AMQPValue::LongLongInt(QUEUE_EXPIRES_MS),
    );
    with_channel(url, async |ch| {
        ch.queue_declare(queue.into(), QueueDeclareOptions::durable(), args)
            .await
            .map(|_| ())
    })
    .await
}

/// Deletes the events queue.
pub(super) async fn delete_queue(url: &str, queue: &str) -> Result<(), lapin::Error> {
    with_channel(url, async |ch| {
        ch.queue_delete(queue.into(), QueueDeleteOptions::default())
            .await
            .map(|_| ())
    })
    .await
}

/// The consumer's business write, in the inbox's transaction.
pub(super) fn apply_event<'c>(
    conn: &'c mut sqlx::PgConnection,
    d: &'c lapin::message::Delivery,
) -> HandlerFuture<'c, sqlx::Error> {
    let id = d.properties.message_id().as_ref().map(|s| s.to_string());
    let body: serde_json::Value =
        serde_json::from_slice(&d.data).unwrap_or(serde_json::Value::Null);
    Box::pin(async move {
        sqlx::query(queries::EVENT)
            .bind(id)
            .bind(sqlx::types::Json(body))
            .execute(conn)
            .await
            .map(|_| ())
    })
}
