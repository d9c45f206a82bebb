//! The pure domain of oncebox: no I/O, no async.
//!
//! Everything here is deterministic given its inputs — time and randomness are passed in — so
//! that the rules which decide whether an intent may be retried, what its key is, and which status
//! it may move to can be tested exhaustively without a database or a network.
//!
//! - [`key`]: idempotency-key validation and the `business_key` / `step_key` helpers.
//! - [`delivery_key`]: the key every destination sees, unique across tenants.
//! - [`hash`]: RFC 8785 (JCS) canonical JSON and the request hash.
//! - [`status`]: the journal statuses and the one table of allowed transitions.
//! - [`retry`]: the retry policy (exponential backoff, full jitter, Retry-After, deadline).
//! - [`outcome`]: the closed set of delivery outcomes.
//! - [`protocol`]: what a worker does with a row it claimed (send, mark first, look up, hand to a
//!   person, expire), shared with the protocol's model.
//! - [`redact`]: redaction rules applied before anything is stored.
//! - [`intent`]: the validated shape of a new intent.
//! - [`intake`]: what an intent is recorded as (redacted, hashed) and when a resubmit is a replay.
//! - [`json`]: JSON text read exactly (numbers beyond ±2^53 refused, not rounded).
//! - [`config`]: the operator's TOML configuration (actions, destinations, redaction).
//! - [`fuzzing`]: the bodies of the fuzz targets (also run over their corpus by the tests).
//! - [`schema`]: an action's JSON Schema for its arguments, enforced on every intake path.
//! - [`duration`]: durations as people write them (`250ms`, `10s`), zero-free where it matters.
//! - [`principal`]: who submitted an intent and who decided on it, as the audit log names them.

pub mod clients;
pub mod config;
pub mod delivery_key;
pub mod duration;
pub mod fuzzing;
pub mod hash;
pub mod intake;
pub mod intent;
mod invalid;
pub mod json;
pub mod key;
pub mod outcome;
pub mod principal;
pub mod protocol;
pub mod redact;
pub mod retry;
pub mod schema;
pub mod status;

pub use clients::{CLIENT_DEFAULTS, ClientDefaults, Ending};
pub use delivery_key::{KeyForm, delivery_key};
pub use hash::{canonical_json, request_hash};
pub use intent::{IntentNames, InvalidIntent, NewIntent};
pub use key::{CallIdentity, business_key, step_key, validate_key};
pub use outcome::{AttemptError, AttemptKind, DeliveryOutcome, ErrorCode};
pub use principal::Principal;
pub use retry::RetryPolicy;
pub use status::Status;
