//! `kind = "amqp"`: a RabbitMQ exchange, published to with publisher confirms.

use std::num::NonZeroUsize;

use serde::Deserialize;

use super::defaults;
use super::{HeaderValue, OrderingSettings, RetrySettings};
use crate::duration::NonZeroDuration;

/// An AMQP destination (`kind = "amqp"`): publishes to an exchange with publisher confirms.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpConfig {
    /// The broker URL (may read the environment with `${NAME}`); default `AMQP_URL`.
    pub amqp_url: Option<HeaderValue>,
    /// The exchange to publish to ("" is the default exchange).
    #[serde(default)]
    pub exchange: String,
    /// The routing key.
    pub routing_key: String,
    /// Always `key`: consumers deduplicate on the message id.
    #[serde(default)]
    pub idempotency: AmqpIdempotency,
    /// Publish as mandatory, so an unroutable message comes back and the intent fails (default
    /// true).
    #[serde(default = "defaults::yes")]
    pub mandatory: bool,
    /// Unconfirmed messages allowed in flight on the channel (default 256).
    #[serde(default = "defaults::max_unconfirmed")]
    pub max_unconfirmed: NonZeroUsize,
    /// How long a publish may wait for its confirm (default "10s").
    #[serde(default = "defaults::timeout")]
    pub timeout: NonZeroDuration,
    /// Retry policy for publishes that definitely did not go out.
    #[serde(default)]
    pub retry: RetrySettings,
    /// Deliveries in flight to this destination at once, per worker (default: no extra limit).
    pub max_in_flight: Option<NonZeroUsize>,
    /// Per-key ordering lanes' policy for a head that fails (`[destinations.X.ordering]`; lanes
    /// block by default).
    #[serde(default)]
    pub ordering: OrderingSettings,
}

/// An AMQP destination's idempotency: always `key` — consumers deduplicate on `message_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AmqpIdempotency {
    /// Consumers deduplicate on the message id (the idempotency key).
    #[default]
    Key,
}
