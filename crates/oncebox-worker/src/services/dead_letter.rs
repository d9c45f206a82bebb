//! Dead letters (docs/architecture.md, "Dead letters"): intents that entered a dead-letter
//! status (`failed`, `expired`, `needs_review`) have a `notify` outbox row, written in the same
//! statement as that status. The notifier service publishes each to the durable topic exchange
//! (routing key = the status), with publisher confirms, persistent, `message_id = "dlq:" + key`;
//! only a confirmed, routed message deletes its row. RabbitMQ being down delays dead letters; it
//! never loses them. A message confirmed by the broker whose confirm was lost in a connection
//! drop can be published twice: consumers deduplicate on the message id.

use std::sync::Arc;
use std::time::Duration;

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use oncebox_core::Status;
use oncebox_store::{ClaimedRow, Lease, Phase};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::service::Service;
use crate::services::wakeup::{Next, sleep_or_stop};
use crate::settings::NOTIFY_BATCH;

/// The reasons, each with its durable quorum queue `<exchange>.<reason>`: the dead-letter
/// statuses ([`Status::is_dead_letter`]).
pub fn reasons() -> impl Iterator<Item = &'static str> {
    Status::dead_letter_reasons().map(Status::as_str)
}

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
    for reason in reasons() {
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
        "delivery_key": row.delivery_key(),
        "intent_id": row.intent_id(),
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
        .with_message_id(oncebox_core::delivery_key::derived_key("dlq", &row.delivery_key()).into())
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

/// Publishes dead letters until stopped, reconnecting with backoff whenever the broker fails.
pub(crate) struct Notifier {
    url: String,
}

impl Notifier {
    /// A notifier publishing to the broker at `url`.
    pub(crate) fn new(url: String) -> Notifier {
        Notifier { url }
    }
}

/// The first wait after a broker failure, and the longest.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(5));

impl Service for Notifier {
    const NAME: &'static str = "notifier";

    async fn run(self, ctx: Arc<Context>, stop: CancellationToken) {
        let exchange = ctx.settings.dead_letter_exchange.clone();
        let mut link: Option<(Connection, Channel)> = None;
        let mut backoff = BACKOFF.0;
        let mut claims = crate::context::PhaseClaims::new(Phase::Notify, NOTIFY_BATCH);
        while !stop.is_cancelled() {
            crate::crash::panic_in(Self::NAME);
            let channel = match &link {
                Some((_, channel)) => channel.clone(),
                None => match connect(&self.url, &exchange).await {
                    Ok(l) => {
                        tracing::info!(%exchange, "dead-letter publisher connected");
                        let channel = l.1.clone();
                        link = Some(l);
                        backoff = BACKOFF.0;
                        channel
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in = ?backoff, "RabbitMQ unreachable; dead letters wait in the outbox");
                        if sleep_or_stop(backoff, &stop).await == Next::Stop {
                            break;
                        }
                        backoff = (backoff * 2).min(BACKOFF.1);
                        continue;
                    }
                },
            };
            let rows = claims.next(&ctx).await;
            if rows.is_empty() {
                if sleep_or_stop(ctx.settings.poll_interval(), &stop).await == Next::Stop {
                    break;
                }
                continue;
            }
            if !publish_batch(&ctx, &channel, &exchange, &rows, backoff).await {
                // Something is wrong with the broker or the channel: start afresh.
                link = None;
            }
        }
        if let Some((conn, _)) = link
            && let Err(e) = conn.close(200, "worker stopping".into()).await
        {
            tracing::debug!(error = %e, "closing the dead-letter connection failed");
        }
    }
}

/// Publishes `rows` and records which went out (deleted) and which wait (rescheduled after
/// `retry_in`); false when any could not be published.
async fn publish_batch(
    ctx: &Context,
    channel: &Channel,
    exchange: &str,
    rows: &[ClaimedRow],
    retry_in: Duration,
) -> bool {
    let (mut published, mut later): (Vec<Lease>, Vec<Lease>) = (Vec::new(), Vec::new());
    for row in rows {
        match publish(channel, exchange, row).await {
            Ok(_) => published.push(row.lease),
            Err(e) => {
                tracing::warn!(key = %row.idempotency_key, error = %e, "dead letter not published; will retry");
                later.push(row.lease);
            }
        }
    }
    let worker = &ctx.settings.id;
    if !published.is_empty()
        && let Err(e) =
            oncebox_store::messages_sent(&ctx.pool, worker, Phase::Notify, &published).await
    {
        tracing::warn!(error = %e, n = published.len(), "published dead letters not marked done; they may be published again (consumers deduplicate on the message id)");
    }
    if !later.is_empty()
        && let Err(e) =
            oncebox_store::messages_later(&ctx.pool, worker, Phase::Notify, &later, retry_in).await
    {
        tracing::warn!(error = %e, n = later.len(), "unpublished dead letters not rescheduled; they wait for their lease");
    }
    later.is_empty()
}
