//! A worker's probe server on `--metrics-addr`: `/metrics` (Prometheus text), `/healthz` (the
//! process and its loops: 503 when a loop has not turned for too long) and `/readyz` (the
//! database answers and its migrations are current), served on axum with the limits of [`oncebox_serve`] — a connection that
//! idles or sends half a request is closed, and the number of connections is capped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use oncebox_serve::Limits;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, now_ms};

/// What the probes check: how long a loop may go without a turn, and the database to reach.
#[derive(Clone)]
pub struct Probes {
    /// A loop that has not turned for this long is stuck, and `/healthz` answers 503.
    pub stuck_after: Duration,
    /// `/readyz` answers 200 only when a new connection with these options answers within 2 s
    /// and every migration this binary knows has been applied
    /// ([`oncebox_store::ReadinessCheck`]: one connection of its own at a time, outside the
    /// pool, counted in the worker's connection budget).
    pub database: Option<sqlx::postgres::PgConnectOptions>,
    /// Connection limits of the probe server.
    pub limits: Limits,
}

#[derive(Clone)]
struct ProbeState {
    metrics: Arc<Metrics>,
    stuck_after: Duration,
    readiness: Option<Arc<oncebox_store::ReadinessCheck>>,
}

/// Binds `addr` and serves the probes until `cancel`; returns the bound address.
///
/// # Errors
/// The bind error.
pub async fn serve(
    metrics: Arc<Metrics>,
    addr: SocketAddr,
    probes: Probes,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let limits = probes.limits;
    let app = router(ProbeState {
        metrics,
        stuck_after: probes.stuck_after,
        readiness: probes
            .database
            .map(|options| Arc::new(oncebox_store::ReadinessCheck::new(options))),
    });
    tokio::spawn(async move {
        oncebox_serve::serve(listener, app, limits, cancel.cancelled_owned()).await;
    });
    Ok(bound)
}

fn router(state: ProbeState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "not found\n".into()) })
        .method_not_allowed_fallback(|| async {
            text(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into())
        })
        .with_state(state)
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, oncebox_serve::metric::CONTENT_TYPE)],
        body,
    )
        .into_response()
}

async fn metrics(State(s): State<ProbeState>) -> Response {
    text(StatusCode::OK, s.metrics.render())
}

async fn healthz(State(s): State<ProbeState>) -> Response {
    let stuck_ms = u64::try_from(s.stuck_after.as_millis()).unwrap_or(u64::MAX);
    match s.metrics.liveness(now_ms(), stuck_ms) {
        Ok(()) => text(StatusCode::OK, "ok\n".into()),
        Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("stuck: {why}\n")),
    }
}

async fn readyz(State(s): State<ProbeState>) -> Response {
    let Some(readiness) = &s.readiness else {
        return text(StatusCode::OK, "ready\n".into());
    };
    match readiness.check().await {
        Ok(()) => text(StatusCode::OK, "ready\n".into()),
        Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}
