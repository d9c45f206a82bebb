//! `/healthz` (the process answers) and `/readyz` (the database answers and oncebox's schema is
//! current).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::AppState;

/// `GET /healthz`: liveness.
#[utoipa::path(
    get,
    path = "/healthz",
    summary = "Liveness",
    security(()),
    responses((status = 200, description = "ok", content_type = "text/plain"))
)]
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 when the database answers a connection of the check's own within 2 s and
/// every migration this binary knows has been applied ([`oncebox_store::ReadinessCheck`]: not
/// through the pool, so a busy or hung pool cannot hold the probe).
#[utoipa::path(
    get,
    path = "/readyz",
    summary = "Database reachable within 2 s and migrations current",
    security(()),
    responses(
        (status = 200, description = "ready", content_type = "text/plain"),
        (status = 503, description = "not ready: the reason", content_type = "text/plain"),
    )
)]
pub(crate) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match state.readiness.check().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
    }
}
