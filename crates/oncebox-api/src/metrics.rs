//! The API's metrics: answers counted by method, route template and status, with every label
//! bounded — a method outside the known set counts as `other`, a path that matches no route as
//! `unmatched` — so that no request can grow the series or the memory.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, PoisonError};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use oncebox_serve::metric::{Def, Kind};

use crate::AppState;

/// Requests answered, by method, route and status.
pub const REQUESTS_TOTAL: Def = Def {
    name: "oncebox_api_requests_total",
    kind: Kind::Counter,
    labels: &["method", "route", "status"],
    help: "Requests answered, by method (other for a non-standard one), matched route \
           template (unmatched for none) and status.",
};

/// Every metric the API exports.
pub const DEFINITIONS: &[Def] = &[REQUESTS_TOTAL];

/// Answers counted by (method, route, status): every part from a bounded set.
pub(crate) type RequestCounts = Arc<Mutex<BTreeMap<(&'static str, String, u16), u64>>>;

/// The methods counted under their own name; any other is `other`.
static KNOWN_METHODS: [Method; 9] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::HEAD,
    Method::OPTIONS,
    Method::CONNECT,
    Method::TRACE,
];

/// The method's label: a known method's name, else `other`.
fn method_label(m: &Method) -> &'static str {
    KNOWN_METHODS
        .iter()
        .find(|k| *k == m)
        .map_or("other", Method::as_str)
}

/// Middleware: counts every answer by method, matched route template (never the raw path: keys
/// stay out of metrics) and status.
pub(crate) async fn count(
    State(counts): State<RequestCounts>,
    req: Request,
    next: Next,
) -> Response {
    let method = method_label(req.method());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let response = next.run(req).await;
    let status = response.status().as_u16();
    *counts
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry((method, route, status))
        .or_insert(0) += 1;
    response
}

/// `GET /metrics`: the Prometheus text exposition.
#[utoipa::path(
    get,
    path = "/metrics",
    summary = "Prometheus metrics",
    security(()),
    responses((status = 200, description = "text exposition", content_type = "text/plain"))
)]
pub(crate) async fn render(State(state): State<Arc<AppState>>) -> Response {
    let mut out = String::new();
    REQUESTS_TOTAL.header(&mut out);
    let counts = state
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for ((method, route, status), n) in counts.iter() {
        let _ = writeln!(
            out,
            "{}{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}",
            REQUESTS_TOTAL.name
        );
    }
    (
        [(header::CONTENT_TYPE, oncebox_serve::metric::CONTENT_TYPE)],
        out,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_come_from_a_bounded_set() {
        assert_eq!(method_label(&Method::POST), "POST");
        let made_up = Method::from_bytes(b"FROBNICATE").expect("a valid token");
        assert_eq!(method_label(&made_up), "other");
    }
}
