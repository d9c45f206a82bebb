//! RFC 9457 problem details, the body of every error, and the reusable answers the OpenAPI
//! document names for them ([`Refused`], [`TooManyRequests`]).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};

/// The body of every error (RFC 9457).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Problem)]
pub(crate) struct ProblemBody<'a> {
    /// Always `about:blank`: the status says what kind of problem it is.
    #[serde(rename = "type")]
    kind: &'a str,
    /// The status's reason phrase.
    title: &'a str,
    /// The HTTP status.
    status: u16,
    /// What went wrong, for a person.
    detail: &'a str,
    /// The field, header or parameter at fault, when there is one.
    field: Option<&'a str>,
}

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
        let body = ProblemBody {
            kind: "about:blank",
            title: self.status.canonical_reason().unwrap_or("error"),
            status: self.status.as_u16(),
            detail: &self.detail,
            field: self.field.as_deref(),
        };
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            serde_json::to_string(&body).unwrap_or_default(),
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

/// The answer of a refused request: `application/problem+json` naming the field.
pub(crate) struct Refused;

impl<'s> utoipa::ToResponse<'s> for Refused {
    fn response() -> (&'s str, RefOr<utoipa::openapi::Response>) {
        (
            "Refused",
            problem_response("Refused: the detail says why and the field names what"),
        )
    }
}

/// The answer of a request over its token's or tenant's rate.
pub(crate) struct TooManyRequests;

impl<'s> utoipa::ToResponse<'s> for TooManyRequests {
    fn response() -> (&'s str, RefOr<utoipa::openapi::Response>) {
        let mut response = problem_response(
            "Over the token's or the tenant's request rate (oncebox serve --token-rate, \
             --tenant-rate): retry after Retry-After seconds",
        );
        if let RefOr::T(r) = &mut response {
            let seconds = utoipa::openapi::ObjectBuilder::new()
                .schema_type(utoipa::openapi::Type::Integer)
                .minimum(Some(1));
            let mut header = utoipa::openapi::header::Header::new(seconds);
            header.description = Some("Seconds to wait".into());
            r.headers.insert("Retry-After".into(), header.into());
        }
        ("TooManyRequests", response)
    }
}

fn problem_response(description: &str) -> RefOr<utoipa::openapi::Response> {
    let body = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("Problem")))
        .build();
    ResponseBuilder::new()
        .description(description)
        .content("application/problem+json", body)
        .build()
        .into()
}
