//! Dead letters (DESIGN §5): intents that entered `failed`, `expired` or `needs_review` have a
//! `notify` outbox row, written in the same transaction as that status. This loop publishes
//! each to the durable topic exchange (routing key = the status), with publisher confirms,
//! persistent, `message_id = "dlq:" + key`; only a confirmed, routed message deletes its row.
//! RabbitMQ being down delays dead letters; it never loses them. A message confirmed by the
//! broker whose confirm was lost in a connection drop can be published twice: consumers
//! deduplicate on the message id.

use std::sync::Arc;
use std::time::Duration;

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use oncebox_store::{ClaimedRow, Phase};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::worker::WorkerSettings;

/// The reasons, each with its durable quorum queue `<exchange>.<reason>`.
pub const REASONS: [&str; 3] = ["failed", "expired", "needs_review"];

/// How long a publish may wait for its confirm before the outcome counts as unknown.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects, opens a confirming channel and declares the exchange, queues and bindings.
///
/// # Errors
/// The broker's error.
pub async fn connect(url: &str, exchange: &str) -> Result<(Connection, Channel), lapin::Error> {
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    channel
        .exchange_declare(
            exchange.into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
    for reason in REASONS {
        let queue = format!("{exchange}.{reason}");
        // Quorum queues, as deploy/rabbitmq/definitions.json declares them (a redeclare with
        // other arguments would be refused).
        let mut args = FieldTable::default();
        args.insert(
            ShortString::from("x-queue-type"),
            AMQPValue::LongString(LongString::from("quorum")),
        );
        channel
            .queue_declare(queue.as_str().into(), QueueDeclareOptions::durable(), args)
            .await?;
        channel
            .queue_bind(
                queue.as_str().into(),
                exchange.into(),
                reason.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    Ok((conn, channel))
}

/// The message of one dead letter: the redacted payload only.
pub fn message(row: &ClaimedRow) -> Value {
    json!({
        "tenant": row.tenant_id,
        "idempotency_key": row.idempotency_key,
        "intent_id": row.intent_id,
        "action": row.action,
        "status": row.status,
        "last_error": row.last_error.as_ref().map(|j| &j.0),
        "attempt_count": row.attempt_count,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "payload": row.payload.0,
    })
}

/// Publishes one dead letter and waits for its confirm; true only when the broker confirmed it
/// and routed it to a queue.
async fn publish(channel: &Channel, exchange: &str, row: &ClaimedRow) -> Result<bool, String> {
    let body = serde_json::to_vec(&message(row)).map_err(|e| e.to_string())?;
    let properties = BasicProperties::default()
        .with_message_id(format!("dlq:{}", row.idempotency_key).into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2);
    let confirm = async {
        let pending = channel
            .basic_publish(
                exchange.into(),
                row.status.as_str().into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                &body,
                properties,
            )
            .await
            .map_err(|e| e.to_string())?;
        pending.await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(CONFIRM_TIMEOUT, confirm).await {
        Err(_) => Err(format!("no confirm within {CONFIRM_TIMEOUT:?}")),
        Ok(Err(e)) => Err(e),
        Ok(Ok(c)) if c.is_ack() => match c.take_message() {
            None => Ok(true),
            Some(returned) => Err(format!("unroutable: {}", returned.reply_text)),
        },
        Ok(Ok(_)) => Err("the broker refused the message (nack)".into()),
    }
}

/// Publishes dead letters until `cancel`, reconnecting with backoff whenever the broker fails.
pub(crate) async fn notify_loop(
    pool: PgPool,
    settings: Arc<WorkerSettings>,
    url: String,
    cancel: CancellationToken,
) {
    let exchange = settings.dead_letter_exchange.clone();
    let mut link: Option<(Connection, Channel)> = None;
    let mut backoff = Duration::from_millis(200);
    while !cancel.is_cancelled() {
        if link.is_none() {
            match connect(&url, &exchange).await {
                Ok(l) => {
                    tracing::info!(%exchange, "dead-letter publisher connected");
                    link = Some(l);
                    backoff = Duration::from_millis(200);
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "RabbitMQ unreachable; dead letters wait in the outbox");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            }
        }
        let rows = match pool.acquire().await {
            Ok(mut conn) => {
                oncebox_store::claim(&mut conn, Phase::Notify, &settings.id, 50, settings.lease)
                    .await
                    .unwrap_or_default()
            }
            Err(_) => Vec::new(),
        };
        if rows.is_empty() {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(settings.poll_interval) => {}
            }
            continue;
        }
        let Some((_, channel)) = &link else { continue };
        let (mut published, mut later) = (Vec::new(), Vec::new());
        for row in &rows {
            match publish(channel, &exchange, row).await {
                Ok(_) => published.push((row.intent_id, row.epoch)),
                Err(e) => {
                    tracing::warn!(key = %row.idempotency_key, error = %e, "dead letter not published; will retry");
                    later.push((row.intent_id, row.epoch));
                }
            }
        }
        if let Ok(mut conn) = pool.acquire().await {
            if !published.is_empty() {
                let _ = oncebox_store::notify_done(&mut conn, &settings.id, &published).await;
            }
            if !later.is_empty() {
                let _ = oncebox_store::notify_later(&mut conn, &settings.id, &later, backoff).await;
            }
        }
        if !later.is_empty() {
            // Something is wrong with the broker or the channel: start afresh.
            link = None;
        }
    }
}
