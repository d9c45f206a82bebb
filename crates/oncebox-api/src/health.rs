//! `/healthz` (the process answers) and `/readyz` (the database answers and oncebox's schema is
//! current).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::AppState;

/// `GET /healthz`: liveness.
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: 200 when every migration this binary knows has been applied.
pub(crate) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    match oncebox_store::migrations_applied(&state.pool).await {
        Ok((applied, known)) if applied >= known => (StatusCode::OK, "ready\n").into_response(),
        Ok((applied, known)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("migrations: {applied} of {known} applied\n"),
        )
            .into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("database: {e}\n")).into_response(),
    }
}
