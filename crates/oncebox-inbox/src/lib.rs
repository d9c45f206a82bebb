//! Exactly-once AMQP consumers.
//!
//! RabbitMQ delivers at least once: after a lost ack or a dropped connection a message comes
//! again. [`Inbox::handle`] applies each `message_id` at most once per consumer by recording it
//! in `oncebox_inbox.processed` **inside the same Postgres transaction** as the consumer's own
//! writes; the message is acked only after that transaction commits. A redelivered message
//! finds its id and is acked without running the handler again.
//!
//! A handler error rolls the transaction back and requeues the message; after `max_deliveries`
//! failures it is rejected without requeue, so the queue's dead-letter exchange receives it.
//! The schema is the workspace's `migrations/0002_inbox.sql` (`oncebox migrate`).
//!
//! The `message_id` of a message from an oncebox AMQP destination is its intent's **delivery
//! key**, unique across tenants (`TENANT:KEY`, or a digest of both): two tenants' intents under
//! one idempotency key are two messages, each applied once. A handler reads which tenant a
//! message is for with [`tenant`] (the `X-Oncebox-Tenant` header), and must keep each tenant's
//! effects apart by it: one queue serves every tenant.
//!
//! Retention: `processed` rows must outlive any redelivery (minutes); [`Inbox::purge`] removes
//! older ones — 7 days is a safe default.
//!
//! For HTTP receivers, [`webhook`] verifies the Standard Webhooks signatures oncebox's HTTP
//! destinations send (and is what they sign with).

pub use oncebox_signing::webhook;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use sqlx::{PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

/// The future a handler returns: it writes through the connection of the inbox's transaction.
/// Write handlers as `fn apply<'c>(conn: &'c mut PgConnection, d: &'c Delivery) ->
/// HandlerFuture<'c, E>` (a function item, so it can lend the connection to its future); see
/// `examples/consumer.rs`.
pub type HandlerFuture<'c, E> = Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'c>>;

/// The header naming the tenant of a message from an oncebox AMQP destination.
pub const TENANT_HEADER: &str = "X-Oncebox-Tenant";

/// The tenant `delivery` was sent for (its [`TENANT_HEADER`]), when it names one as text.
pub fn tenant(delivery: &Delivery) -> Option<String> {
    let headers = delivery.properties.headers().as_ref()?;
    match headers.inner().get(TENANT_HEADER)? {
        lapin::types::AMQPValue::LongString(s) => {
            Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
        }
        lapin::types::AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

/// What became of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Applied now, committed and acked.
    Processed,
    /// Already applied before (a redelivery): acked, nothing run.
    Duplicate,
    /// The handler failed; the message was requeued.
    Requeued,
    /// The handler failed `max_deliveries` times (or the message has no id): rejected to the
    /// queue's dead-letter exchange.
    Rejected,
}

/// Why a delivery could not be settled; the broker will redeliver it.
#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The database failed.
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// The broker failed (ack, nack, reject or the connection).
    #[error("broker: {0}")]
    Broker(#[from] lapin::Error),
}

/// Counts of a consumer's work, for reports and tests.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages applied.
    pub processed: AtomicU64,
    /// Redeliveries filtered.
    pub duplicates: AtomicU64,
    /// Handler failures requeued.
    pub requeued: AtomicU64,
    /// Messages rejected to the dead-letter exchange.
    pub rejected: AtomicU64,
    /// Deliveries flagged `redelivered` by the broker.
    pub redelivered: AtomicU64,
}

/// An exactly-once consumer over a Postgres pool.
#[derive(Debug, Clone)]
pub struct Inbox {
    pool: PgPool,
    consumer: String,
    max_deliveries: u32,
    /// What happened so far.
    pub counters: Arc<Counters>,
}

impl Inbox {
    /// An inbox for `consumer` (its name scopes the dedup records), rejecting a message after
    /// `max_deliveries` handler failures.
    pub fn new(pool: PgPool, consumer: impl Into<String>, max_deliveries: u32) -> Inbox {
        Inbox {
            pool,
            consumer: consumer.into(),
            max_deliveries: max_deliveries.max(1),
            counters: Arc::default(),
        }
    }

    /// Applies one delivery at most once, then settles it with the broker.
    ///
    /// # Errors
    /// [`InboxError`] when the database or the broker fails; the message is then neither acked
    /// nor recorded, and the broker redelivers it.
    pub async fn handle<E, F>(&self, delivery: &Delivery, handler: F) -> Result<Handled, InboxError>
    where
        E: std::fmt::Display,
        F: for<'c> FnOnce(&'c mut PgConnection, &'c Delivery) -> HandlerFuture<'c, E>,
    {
        if delivery.redelivered {
            self.counters.redelivered.fetch_add(1, Ordering::Relaxed);
        }
        let Some(id) = delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.to_string())
        else {
            tracing::warn!("a message without message_id cannot be deduplicated: rejected");
            delivery
                .reject(BasicRejectOptions { requeue: false })
                .await?;
            self.counters.rejected.fetch_add(1, Ordering::Relaxed);
            return Ok(Handled::Rejected);
        };
        let mut tx = self.pool.begin().await?;
        let fresh: Option<i32> = sqlx::query_scalar(include_str!("../queries/mark_processed.sql"))
            .bind(&self.consumer)
            .bind(&id)
            .fetch_optional(&mut *tx)
            .await?;
        if fresh.is_none() {
            tx.rollback().await?;
            delivery.ack(BasicAckOptions::default()).await?;
            self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
            return Ok(Handled::Duplicate);
        }
        match handler(&mut tx, delivery).await {
            Ok(()) => {
                tx.commit().await?;
                delivery.ack(BasicAckOptions::default()).await?;
                self.counters.processed.fetch_add(1, Ordering::Relaxed);
                Ok(Handled::Processed)
            }
            Err(e) => {
                tx.rollback().await?;
                let failures: i32 =
                    sqlx::query_scalar(include_str!("../queries/count_failure.sql"))
                        .bind(&self.consumer)
                        .bind(&id)
                        .bind(e.to_string())
                        .fetch_one(&self.pool)
                        .await?;
                if failures as u32 >= self.max_deliveries {
                    tracing::warn!(message_id = %id, failures, error = %e, "rejected to the dead-letter exchange");
                    delivery
                        .reject(BasicRejectOptions { requeue: false })
                        .await?;
                    self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                    Ok(Handled::Rejected)
                } else {
                    delivery
                        .nack(BasicNackOptions {
                            requeue: true,
                            ..BasicNackOptions::default()
                        })
                        .await?;
                    self.counters.requeued.fetch_add(1, Ordering::Relaxed);
                    Ok(Handled::Requeued)
                }
            }
        }
    }

    /// Consumes `queue` at `url` until `cancel`, handling every delivery with `handler`;
    /// reconnects with backoff whenever the broker drops the connection.
    pub async fn run<E, F>(
        &self,
        url: &str,
        queue: &str,
        prefetch: u16,
        handler: F,
        cancel: CancellationToken,
    ) where
        E: std::fmt::Display,
        F: for<'c> Fn(&'c mut PgConnection, &'c Delivery) -> HandlerFuture<'c, E>,
    {
        let mut backoff = Duration::from_millis(100);
        while !cancel.is_cancelled() {
            let session = async {
                let conn = Connection::connect(url, ConnectionProperties::default()).await?;
                let channel = conn.create_channel().await?;
                channel
                    .basic_qos(prefetch, BasicQosOptions::default())
                    .await?;
                let consumer = channel
                    .basic_consume(
                        queue.into(),
                        self.consumer.as_str().into(),
                        BasicConsumeOptions::default(),
                        FieldTable::default(),
                    )
                    .await?;
                Ok::<_, lapin::Error>((conn, channel, consumer))
            };
            let (conn, channel, mut consumer) = match session.await {
                Ok(s) => {
                    backoff = Duration::from_millis(100);
                    s
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "cannot consume; retrying");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            loop {
                let next = tokio::select! {
                    _ = cancel.cancelled() => break,
                    n = consumer.next() => n,
                };
                match next {
                    Some(Ok(delivery)) => {
                        if let Err(e) = self.handle(&delivery, &handler).await {
                            tracing::warn!(error = %e, "delivery not settled; the broker will redeliver it");
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "consumer stream failed; reconnecting");
                        break;
                    }
                    None => break,
                }
            }
            // Stop consuming, then close the channel, then the connection.
            drop(consumer);
            if let Err(e) = channel.close(200, "bye".into()).await {
                tracing::debug!(error = %e, "closing the consumer's channel failed");
            }
            if let Err(e) = conn.close(200, "bye".into()).await {
                tracing::debug!(error = %e, "closing the consumer's connection failed");
            }
        }
    }

    /// Removes dedup records older than `older_than`.
    ///
    /// # Errors
    /// The database's error.
    pub async fn purge(&self, older_than: Duration) -> Result<u64, sqlx::Error> {
        let r = sqlx::query(include_str!("../queries/purge.sql"))
            .bind(&self.consumer)
            .bind(older_than.as_secs_f64())
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }
}
