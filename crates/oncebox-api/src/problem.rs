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
}

impl Problem {
    /// A problem with `status` and `detail`.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Problem {
        Problem {
            status,
            detail: detail.into(),
            field: None,
        }
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
        (
            self.status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body.to_string(),
        )
            .into_response()
    }
}
