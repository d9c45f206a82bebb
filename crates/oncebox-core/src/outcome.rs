//! The closed set of things a delivery attempt can end in.
//!
//! Classification (HTTP status, AMQP confirm, transport error → outcome) happens in one place in
//! the delivery layer; everything downstream — the worker, the journal, the retry report —
//! matches on this enum and nothing else.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::retry::RetryAfter;
use crate::status::Status;

/// Why an intent's last step did not simply succeed, in words stable enough for metrics and
/// alerts: the `code` of `intents.last_error` and the `attempts.error_code` column (the enum type
/// `oncebox.error_code`). Transport and receiver codes come from the delivery adapters; the rest
/// name a decision taken without a successful call (see [`AttemptKind::error_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "sqlx",
    derive(sqlx::Type),
    sqlx(type_name = "oncebox.error_code", rename_all = "snake_case")
)]
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
    /// oncebox's own policy refused the request (for example, an action no longer configured).
    PolicyRejected,
    /// An earlier attempt was dispatched and never recorded: its outcome is unknown.
    PreviousOutcomeUnknown,
    /// The deadline passed before another attempt could start.
    Expired,
    /// The outcome is unknown and the destination has no lookup.
    NoLookup,
    /// A lookup found nothing yet (inside the consistency window).
    LookupNone,
    /// A lookup failed (transiently, or for good).
    LookupFailed,
    /// A lookup found several effects for one intent.
    LookupAmbiguous,
    /// A lookup found one effect whose fields differ from the intent.
    LookupMismatch,
    /// Nothing was found after the consistency window: the intent was re-issued with its key.
    Reissue,
    /// An operator decided the intent failed.
    Operator,
    /// An MCP server refused the call (a JSON-RPC error such as an unknown tool or invalid
    /// arguments) or its tool reported an error (`isError`).
    ToolError,
}

impl ErrorCode {
    /// Every code, in declaration order (the labels of `oncebox.error_code`).
    pub const ALL: [ErrorCode; 22] = [
        ErrorCode::ConnectRefused,
        ErrorCode::Dns,
        ErrorCode::Tls,
        ErrorCode::Timeout,
        ErrorCode::ConnectionReset,
        ErrorCode::HttpStatus,
        ErrorCode::MalformedResponse,
        ErrorCode::StreamIncomplete,
        ErrorCode::Unroutable,
        ErrorCode::Nacked,
        ErrorCode::WorkerLost,
        ErrorCode::PolicyRejected,
        ErrorCode::PreviousOutcomeUnknown,
        ErrorCode::Expired,
        ErrorCode::NoLookup,
        ErrorCode::LookupNone,
        ErrorCode::LookupFailed,
        ErrorCode::LookupAmbiguous,
        ErrorCode::LookupMismatch,
        ErrorCode::Reissue,
        ErrorCode::Operator,
        ErrorCode::ToolError,
    ];

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
            ErrorCode::PreviousOutcomeUnknown => "previous_outcome_unknown",
            ErrorCode::Expired => "expired",
            ErrorCode::NoLookup => "no_lookup",
            ErrorCode::LookupNone => "lookup_none",
            ErrorCode::LookupFailed => "lookup_failed",
            ErrorCode::LookupAmbiguous => "lookup_ambiguous",
            ErrorCode::LookupMismatch => "lookup_mismatch",
            ErrorCode::Reissue => "reissue",
            ErrorCode::Operator => "operator",
            ErrorCode::ToolError => "tool_error",
        }
    }
}

/// What went wrong, with enough detail for the retry report: an attempt's error, and the
/// journal's `last_error` (`{"code", "detail", "status_code"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptError {
    /// The stable class of the problem.
    pub code: ErrorCode,
    /// Human-readable detail (never a secret: header values are not included).
    pub detail: String,
    /// The HTTP status, when the receiver answered.
    pub status_code: Option<u16>,
}

impl AttemptError {
    /// An error with no HTTP status.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> AttemptError {
        AttemptError {
            code,
            detail: detail.into(),
            status_code: None,
        }
    }
}

/// What one row of the retry report (`oncebox.attempts.outcome`, the enum type
/// `oncebox.attempt_kind`) records: an attempt's outcome class, a decision taken without a
/// call, a reconciliation lookup's finding, or an operator's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "sqlx",
    derive(sqlx::Type),
    sqlx(type_name = "oncebox.attempt_kind", rename_all = "snake_case")
)]
pub enum AttemptKind {
    /// An attempt succeeded.
    Succeeded,
    /// An attempt definitely did not execute; retried.
    RetryBeforeExecution,
    /// An attempt was refused for good.
    Permanent,
    /// An attempt may have executed; nobody knows.
    Unknown,
    /// A claimed row's earlier attempt was dispatched and never recorded.
    PreviousOutcomeUnknown,
    /// The deadline passed before an attempt could start.
    Expired,
    /// oncebox's own policy refused the intent (its action is no longer configured).
    PolicyRejected,
    /// The outcome is unknown and no lookup is configured.
    NoLookup,
    /// A lookup found exactly one agreeing effect.
    LookupFound,
    /// A lookup found nothing, inside the consistency window.
    LookupNone,
    /// A lookup failed.
    LookupFailed,
    /// A lookup found several effects.
    LookupAmbiguous,
    /// A lookup found one effect whose fields differ.
    LookupMismatch,
    /// Nothing found after the consistency window: re-issued with the same key.
    Reissue,
    /// An operator sent the intent back to pending.
    OperatorRetry,
    /// An operator decided the intent.
    OperatorResolved,
    /// An operator (or the agent) cancelled the intent before dispatch.
    Cancelled,
}

impl AttemptKind {
    /// Every kind, in declaration order (the labels of `oncebox.attempt_kind`).
    pub const ALL: [AttemptKind; 17] = [
        AttemptKind::Succeeded,
        AttemptKind::RetryBeforeExecution,
        AttemptKind::Permanent,
        AttemptKind::Unknown,
        AttemptKind::PreviousOutcomeUnknown,
        AttemptKind::Expired,
        AttemptKind::PolicyRejected,
        AttemptKind::NoLookup,
        AttemptKind::LookupFound,
        AttemptKind::LookupNone,
        AttemptKind::LookupFailed,
        AttemptKind::LookupAmbiguous,
        AttemptKind::LookupMismatch,
        AttemptKind::Reissue,
        AttemptKind::OperatorRetry,
        AttemptKind::OperatorResolved,
        AttemptKind::Cancelled,
    ];

    /// The snake_case name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptKind::Succeeded => "succeeded",
            AttemptKind::RetryBeforeExecution => "retry_before_execution",
            AttemptKind::Permanent => "permanent",
            AttemptKind::Unknown => "unknown",
            AttemptKind::PreviousOutcomeUnknown => "previous_outcome_unknown",
            AttemptKind::Expired => "expired",
            AttemptKind::PolicyRejected => "policy_rejected",
            AttemptKind::NoLookup => "no_lookup",
            AttemptKind::LookupFound => "lookup_found",
            AttemptKind::LookupNone => "lookup_none",
            AttemptKind::LookupFailed => "lookup_failed",
            AttemptKind::LookupAmbiguous => "lookup_ambiguous",
            AttemptKind::LookupMismatch => "lookup_mismatch",
            AttemptKind::Reissue => "reissue",
            AttemptKind::OperatorRetry => "operator_retry",
            AttemptKind::OperatorResolved => "operator_resolved",
            AttemptKind::Cancelled => "cancelled",
        }
    }

    /// The `last_error` code a decision of this kind leaves on the intent; `None` for the
    /// outcome classes (their error comes from the attempt) and for operators' actions.
    pub fn error_code(self) -> Option<ErrorCode> {
        Some(match self {
            AttemptKind::PreviousOutcomeUnknown => ErrorCode::PreviousOutcomeUnknown,
            AttemptKind::Expired => ErrorCode::Expired,
            AttemptKind::PolicyRejected => ErrorCode::PolicyRejected,
            AttemptKind::NoLookup => ErrorCode::NoLookup,
            AttemptKind::LookupNone => ErrorCode::LookupNone,
            AttemptKind::LookupFailed => ErrorCode::LookupFailed,
            AttemptKind::LookupAmbiguous => ErrorCode::LookupAmbiguous,
            AttemptKind::LookupMismatch => ErrorCode::LookupMismatch,
            AttemptKind::Reissue => ErrorCode::Reissue,
            _ => return None,
        })
    }
}

impl fmt::Display for AttemptKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The snake_case name (a metric label).
    pub fn as_str(self) -> &'static str {
        self.kind().as_str()
    }

    /// The retry report's kind for an attempt of this class.
    pub fn kind(self) -> AttemptKind {
        match self {
            OutcomeClass::Succeeded => AttemptKind::Succeeded,
            OutcomeClass::RetryBeforeExecution => AttemptKind::RetryBeforeExecution,
            OutcomeClass::Permanent => AttemptKind::Permanent,
            OutcomeClass::Unknown => AttemptKind::Unknown,
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
        for code in ErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(code).expect("serialise"),
                code.as_str()
            );
        }
        for kind in AttemptKind::ALL {
            assert_eq!(
                serde_json::to_value(kind).expect("serialise"),
                kind.as_str()
            );
            if let Some(code) = kind.error_code() {
                assert_eq!(
                    code.as_str(),
                    kind.as_str(),
                    "a decision's code is its name"
                );
            }
        }
        let e: AttemptError =
            serde_json::from_value(serde_json::json!({"code": "operator", "detail": "x"}))
                .expect("a last_error without status_code reads");
        assert_eq!(e, AttemptError::new(ErrorCode::Operator, "x"));
        assert!(
            serde_json::from_value::<AttemptError>(
                serde_json::json!({"code": "nope", "detail": ""})
            )
            .is_err(),
            "an unknown code is an error, never a silent fallback"
        );
    }
}
