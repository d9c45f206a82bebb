//! Delivery adapters (HTTP, AMQP, MCP): turn one attempt of an intent into one request at its destination,
//! carrying the stable idempotency key, and classify the answer into a
//! [`DeliveryOutcome`] — the only place where that decision is made (docs/architecture.md, "Classify").

mod amqp;
mod classify;
mod http;
mod lookup;
pub mod mcp;

pub use amqp::AmqpDestination;
pub use classify::{StatusClass, StatusOverrides, classify_status};
pub use http::{
    BuildError, DeliveryRequest, HttpDestination, MAX_RESPONSE_BYTES, install_crypto_provider,
    shown,
};
pub use lookup::{HttpLookup, LookupResult, MAX_LOOKUP_BYTES};
pub use mcp::{McpClient, McpDestination};
pub use oncebox_core::DeliveryOutcome;
