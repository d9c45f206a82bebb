//! RFC 9457 problem details, the body of every error.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answer: status, human detail, and the field at fault when there is one.
#[derive(Debug)]
pub struct Problem {
    status: StatusCode,
    detail: String,
    field: Option<String>,
    retry_after: Option<std::time::Duration>,
}

impl Problem {
    /// A problem with `status` and `detail`.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            detail: detail.into(),
            field: None,
            retry_after: None,
        }
    }

    /// Says when to try again (`Retry-After`, in whole seconds, at least 1).
    pub fn retry_after(mut self, wait: std::time::Duration) -> Problem {
        self.retry_after = Some(wait);
        self
    }

    /// Names the field at fault.
    pub fn field(mut self, field: &str) -> Problem {
        self.field = Some(field.to_owned());
        self
    }

    /// A 500 whose cause is logged, not shown.
    pub fn internal(e: impl std::fmt::Display) -> Problem {
        tracing::error!(error = %e, "internal error");
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error; the request may be retried with the same key",
        )
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = json!({
            "type": "about:blank",
            "title": self.status.canonical_reason().unwrap_or("error"),
            "status": self.status.as_u16(),
            "detail": self.detail,
            "field": self.field,
        });
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body.to_string(),
        )
            .into_response();
        if let Some(wait) = self.retry_after {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, secs.max(1).into());
        }
        response
    }
}

/// The answer to a path that no endpoint serves: 404, problem+json like every other error.
pub(crate) async fn not_found() -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no endpoint has this path; /openapi.json lists them",
    )
    .field("path")
}

/// The answer to a method an endpoint does not serve: 405 (axum adds the `Allow` header).
pub(crate) async fn method_not_allowed() -> Problem {
    Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "this endpoint does not answer this method; the Allow header lists those it does",
    )
    .field("method")
}

/// Parses a request body as JSON read exactly ([`oncebox_core::json::parse`]): text that is
/// not JSON names the field `body`; a number beyond ±2^53 names its place in the body
/// (`arguments/amount`), never rounded into a float.
pub(crate) fn json_body(bytes: &[u8]) -> Result<serde_json::Value, Problem> {
    use oncebox_core::json::{JsonError, parse};
    parse(bytes).map_err(|e| {
        let field = match &e {
            JsonError::Syntax(_) => "body",
            JsonError::UnsafeNumber { pointer } => pointer.trim_start_matches('/'),
        };
        let detail = match &e {
            JsonError::Syntax(e) => format!("the body is not JSON: {e}"),
            JsonError::UnsafeNumber { .. } => e.to_string(),
        };
        Problem::new(StatusCode::BAD_REQUEST, detail).field(if field.is_empty() {
            "body"
        } else {
            field
        })
    })
}

/// Reads a request body of at most `limit` bytes: a longer one is 413, one that does not arrive
/// within the server's body timeout ([`oncebox_serve::BodyTimedOut`]) is 408; both name the
/// field `body`.
pub(crate) async fn read_body(
    body: axum::body::Body,
    limit: usize,
) -> Result<axum::body::Bytes, Problem> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if oncebox_serve::timed_out(&e) {
            Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive in time; send it whole and promptly",
            )
            .field("body")
        } else {
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body exceeds {limit} bytes"),
            )
            .field("body")
        }
    })
}
