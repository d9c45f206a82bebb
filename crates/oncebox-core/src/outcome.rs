//! The closed set of things a delivery attempt can end in.
//!
//! Classification (HTTP status, AMQP confirm, transport error → outcome) happens in one place in
//! the delivery layer; everything downstream — the worker, the journal, the retry report —
//! matches on this enum and nothing else.

use serde::{Deserialize, Serialize};

use crate::retry::RetryAfter;
use crate::status::Status;

/// Why an attempt did not simply succeed, in words stable enough for metrics and alerts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The connection was refused: nothing was sent.
    ConnectRefused,
    /// The destination's name did not resolve: nothing was sent.
    Dns,
    /// The TLS handshake failed: nothing was sent.
    Tls,
    /// No answer within the timeout after the request was sent.
    Timeout,
    /// The connection broke after the request was sent.
    ConnectionReset,
    /// The receiver answered with an HTTP status that is not success.
    HttpStatus,
    /// The answer could not be read as promised (bad JSON, missing reference).
    MalformedResponse,
    /// An event stream closed without its completion event.
    StreamIncomplete,
    /// The broker returned the message as unroutable.
    Unroutable,
    /// The broker refused the message (publisher-confirm nack).
    Nacked,
    /// The worker crashed or lost its lease after dispatch.
    WorkerLost,
    /// oncebox's own policy refused the request.
    PolicyRejected,
}

impl ErrorCode {
    /// The snake_case name stored in `attempts.error_code` and `intents.last_error`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ConnectRefused => "connect_refused",
            ErrorCode::Dns => "dns",
            ErrorCode::Tls => "tls",
            ErrorCode::Timeout => "timeout",
            ErrorCode::ConnectionReset => "connection_reset",
            ErrorCode::HttpStatus => "http_status",
            ErrorCode::MalformedResponse => "malformed_response",
            ErrorCode::StreamIncomplete => "stream_incomplete",
            ErrorCode::Unroutable => "unroutable",
            ErrorCode::Nacked => "nacked",
            ErrorCode::WorkerLost => "worker_lost",
            ErrorCode::PolicyRejected => "policy_rejected",
        }
    }
}

/// What went wrong, with enough detail for the retry report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// The stable class of the problem.
    pub code: ErrorCode,
    /// Human-readable detail (never a secret: header values are not included).
    pub detail: String,
    /// The HTTP status, when the receiver answered.
    pub status_code: Option<u16>,
}

/// How one delivery attempt ended. Closed: there is no fifth case.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryOutcome {
    /// The effect happened.
    Succeeded {
        /// The HTTP status, for HTTP destinations.
        status_code: Option<u16>,
        /// The receiver's id for the effect (invoice number, message id).
        external_reference: Option<String>,
        /// The receiver's answer, bounded by the delivery layer.
        response: Option<serde_json::Value>,
    },
    /// The request definitely did not execute (refused, 429, 503, …); retrying with the same key
    /// is safe.
    RetryBeforeExecution {
        /// What happened.
        error: AttemptError,
        /// The receiver's Retry-After, if it sent one.
        retry_after: Option<RetryAfter>,
    },
    /// The receiver refused for good (400, 401, 403, 404, 409, 422, policy): never retry.
    Permanent {
        /// What happened.
        error: AttemptError,
    },
    /// The request may have executed; nobody knows. Resolved by re-sending with the same key
    /// (key-honouring receivers) or by reconciliation, never by a blind re-send.
    Unknown {
        /// What happened.
        error: AttemptError,
    },
}

/// The outcome's class alone, as stored in `attempts.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeClass {
    /// See [`DeliveryOutcome::Succeeded`].
    Succeeded,
    /// See [`DeliveryOutcome::RetryBeforeExecution`].
    RetryBeforeExecution,
    /// See [`DeliveryOutcome::Permanent`].
    Permanent,
    /// See [`DeliveryOutcome::Unknown`].
    Unknown,
}

impl OutcomeClass {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeClass::Succeeded => "succeeded",
            OutcomeClass::RetryBeforeExecution => "retry_before_execution",
            OutcomeClass::Permanent => "permanent",
            OutcomeClass::Unknown => "unknown",
        }
    }
}

impl DeliveryOutcome {
    /// The class of this outcome.
    pub fn class(&self) -> OutcomeClass {
        match self {
            DeliveryOutcome::Succeeded { .. } => OutcomeClass::Succeeded,
            DeliveryOutcome::RetryBeforeExecution { .. } => OutcomeClass::RetryBeforeExecution,
            DeliveryOutcome::Permanent { .. } => OutcomeClass::Permanent,
            DeliveryOutcome::Unknown { .. } => OutcomeClass::Unknown,
        }
    }

    /// The error, for every outcome but success.
    pub fn error(&self) -> Option<&AttemptError> {
        match self {
            DeliveryOutcome::Succeeded { .. } => None,
            DeliveryOutcome::RetryBeforeExecution { error, .. }
            | DeliveryOutcome::Permanent { error }
            | DeliveryOutcome::Unknown { error } => Some(error),
        }
    }

    /// The journal status an `in_flight` intent moves to, when retries remain.
    /// (When the retry policy gives up, a `RetryBeforeExecution` ends `failed` or `expired`.)
    pub fn next_status(&self) -> Status {
        match self {
            DeliveryOutcome::Succeeded { .. } => Status::Succeeded,
            DeliveryOutcome::RetryBeforeExecution { .. } => Status::Pending,
            DeliveryOutcome::Permanent { .. } => Status::Failed,
            DeliveryOutcome::Unknown { .. } => Status::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: ErrorCode) -> AttemptError {
        AttemptError {
            code,
            detail: "d".into(),
            status_code: None,
        }
    }

    #[test]
    fn every_outcome_maps_to_a_transition_allowed_from_in_flight() {
        let outcomes = [
            DeliveryOutcome::Succeeded {
                status_code: Some(201),
                external_reference: Some("inv-1".into()),
                response: None,
            },
            DeliveryOutcome::RetryBeforeExecution {
                error: err(ErrorCode::HttpStatus),
                retry_after: None,
            },
            DeliveryOutcome::Permanent {
                error: err(ErrorCode::HttpStatus),
            },
            DeliveryOutcome::Unknown {
                error: err(ErrorCode::Timeout),
            },
        ];
        let classes: Vec<_> = outcomes.iter().map(|o| o.class().as_str()).collect();
        assert_eq!(
            classes,
            [
                "succeeded",
                "retry_before_execution",
                "permanent",
                "unknown"
            ]
        );
        for o in &outcomes {
            assert!(
                Status::InFlight.transition(o.next_status()).is_ok(),
                "{o:?}"
            );
            assert_eq!(o.error().is_none(), o.class() == OutcomeClass::Succeeded);
        }
    }

    #[test]
    fn error_codes_serialise_as_their_names() {
        for code in [
            ErrorCode::ConnectRefused,
            ErrorCode::StreamIncomplete,
            ErrorCode::WorkerLost,
        ] {
            assert_eq!(
                serde_json::to_value(code).expect("serialise"),
                code.as_str()
            );
        }
    }
}
