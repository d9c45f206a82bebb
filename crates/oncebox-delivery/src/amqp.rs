//! The AMQP adapter: publish the intent to a RabbitMQ exchange with publisher confirms.
//! AMQP destinations honour keys by contract: `message_id` is the idempotency key and consumers
//! deduplicate on it (see the `oncebox-inbox` crate), so an unknown outcome is re-published.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};
use oncebox_core::DeliveryOutcome;
use oncebox_core::config::AmqpConfig;
use oncebox_core::outcome::{AttemptError, ErrorCode};
use tokio::sync::{Mutex, Semaphore};

use crate::http::{BuildError, DeliveryRequest};

/// A configured AMQP destination with its (lazily opened, reused) connection and channel.
#[derive(Debug, Clone)]
pub struct AmqpDestination {
    name: String,
    url: String,
    exchange: String,
    routing_key: String,
    mandatory: bool,
    timeout: Duration,
    unconfirmed: Arc<Semaphore>,
    link: Arc<Mutex<Option<(Connection, Channel)>>>,
}

fn err(code: ErrorCode, detail: String) -> AttemptError {
    AttemptError {
        code,
        detail,
        status_code: None,
    }
}

impl AmqpDestination {
    /// Builds the adapter for destination `name` (`amqp_url` resolved, or `AMQP_URL` read by the
    /// caller and passed as `default_url`). Nothing is connected until the first delivery.
    ///
    /// # Errors
    /// [`BuildError`] when no broker URL is known.
    pub fn new(
        name: &str,
        dest: &AmqpConfig,
        default_url: Option<&str>,
    ) -> Result<AmqpDestination, BuildError> {
        let url = dest
            .amqp_url
            .as_ref()
            .map(|u| u.expose().to_owned())
            .or_else(|| default_url.map(str::to_owned))
            .ok_or_else(|| {
                BuildError::new(name, "amqp_url", "no broker URL: set amqp_url or AMQP_URL")
            })?;
        Ok(AmqpDestination {
            name: name.to_owned(),
            url,
            exchange: dest.exchange.clone(),
            routing_key: dest.routing_key.clone(),
            mandatory: dest.mandatory,
            timeout: dest.timeout.get(),
            unconfirmed: Arc::new(Semaphore::new(dest.max_unconfirmed.get())),
            link: Arc::new(Mutex::new(None)),
        })
    }

    /// The destination's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configured confirm timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn channel(&self) -> Result<Channel, lapin::Error> {
        let mut link = self.link.lock().await;
        if let Some((conn, channel)) = link.as_ref()
            && conn.status().connected()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        // Reconnect with backoff (the caller bounds the whole wait by its budget).
        let open = || async {
            let conn = Connection::connect(&self.url, ConnectionProperties::default()).await?;
            let channel = conn.create_channel().await?;
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
            Ok::<_, lapin::Error>((conn, channel))
        };
        let (conn, channel) = open
            .retry(
                ExponentialBuilder::default()
                    .with_min_delay(Duration::from_millis(50))
                    .with_max_delay(Duration::from_secs(2))
                    .with_max_times(6),
            )
            .notify(|e, d| tracing::warn!(destination = %self.name, error = %e, retry_in = ?d, "reconnecting to the broker"))
            .await?;
        *link = Some((conn, channel.clone()));
        Ok(channel)
    }

    async fn forget(&self) {
        *self.link.lock().await = None;
    }

    /// Publishes one attempt and waits (at most `budget` or the timeout) for its confirm.
    #[tracing::instrument(skip_all, fields(destination = %self.name, key = %req.delivery_key, attempt = req.attempt))]
    pub async fn deliver(&self, req: &DeliveryRequest<'_>, budget: Duration) -> DeliveryOutcome {
        let limit = budget.min(self.timeout);
        let Ok(_slot) = self.unconfirmed.acquire().await else {
            return not_sent("adapter closed".into());
        };
        let channel = match tokio::time::timeout(limit, self.channel()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                self.forget().await;
                return not_sent(format!("connecting to the broker: {e}"));
            }
            Err(_) => return not_sent(format!("no broker connection within {limit:?}")),
        };
        let body = match serde_json::to_vec(req.arguments) {
            Ok(b) => b,
            Err(e) => {
                return DeliveryOutcome::Permanent {
                    error: err(ErrorCode::PolicyRejected, format!("arguments: {e}")),
                };
            }
        };
        let published = channel
            .basic_publish(
                self.exchange.as_str().into(),
                self.routing_key.as_str().into(),
                BasicPublishOptions {
                    mandatory: self.mandatory,
                    ..BasicPublishOptions::default()
                },
                &body,
                properties(req),
            )
            .await;
        let pending = match published {
            Ok(p) => p,
            Err(e) => {
                // The frame may or may not have reached the broker.
                self.forget().await;
                return DeliveryOutcome::Unknown {
                    error: err(ErrorCode::ConnectionReset, format!("publish failed: {e}")),
                };
            }
        };
        match tokio::time::timeout(limit, pending).await {
            Err(_) => {
                self.forget().await;
                DeliveryOutcome::Unknown {
                    error: err(
                        ErrorCode::Timeout,
                        format!("no publisher confirm within {limit:?}"),
                    ),
                }
            }
            Ok(Err(e)) => {
                self.forget().await;
                DeliveryOutcome::Unknown {
                    error: err(
                        ErrorCode::ConnectionReset,
                        format!("connection lost before the confirm: {e}"),
                    ),
                }
            }
            Ok(Ok(confirm)) => self.confirmed(confirm, req),
        }
    }

    /// Classifies a publisher confirm: ack → succeeded (unless the message came back
    /// unroutable: permanent), nack → not executed.
    fn confirmed(&self, confirm: Confirmation, req: &DeliveryRequest<'_>) -> DeliveryOutcome {
        if !confirm.is_ack() {
            return DeliveryOutcome::RetryBeforeExecution {
                error: err(
                    ErrorCode::Nacked,
                    "the broker refused the message (nack)".into(),
                ),
                retry_after: None,
            };
        }
        match confirm.take_message() {
            None => DeliveryOutcome::Succeeded {
                status_code: None,
                external_reference: Some(req.delivery_key.to_owned()),
                response: None,
            },
            Some(returned) => DeliveryOutcome::Permanent {
                error: err(
                    ErrorCode::Unroutable,
                    format!(
                        "unroutable: exchange {:?} has no queue for routing key {:?} ({})",
                        self.exchange, self.routing_key, returned.reply_text
                    ),
                ),
            },
        }
    }
}

/// Not sent: retry with the same key.
fn not_sent(detail: String) -> DeliveryOutcome {
    DeliveryOutcome::RetryBeforeExecution {
        error: err(ErrorCode::ConnectRefused, detail),
        retry_after: None,
    }
}

/// A message's properties: persistent JSON, `message_id` = the key, and the headers that name
/// tenant, action, request hash and attempt.
fn properties(req: &DeliveryRequest<'_>) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (k, v) in [
        ("Idempotency-Key", req.delivery_key.to_owned()),
        ("X-Oncebox-Tenant", req.tenant_id.to_owned()),
        ("X-Oncebox-Action", req.action.to_owned()),
        ("X-Oncebox-Request-Hash", req.request_hash.to_owned()),
        ("X-Oncebox-Attempt", req.attempt.to_string()),
    ] {
        headers.insert(
            ShortString::from(k),
            AMQPValue::LongString(LongString::from(v)),
        );
    }
    BasicProperties::default()
        .with_message_id(req.delivery_key.into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(headers)
}
