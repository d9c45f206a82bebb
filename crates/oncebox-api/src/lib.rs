//! The agent-facing HTTP API (docs/architecture.md, "Interfaces"): orchestrators that do not
//! share oncebox's database submit intents with an `Idempotency-Key`, read results (with
//! long-poll) and cancel; operators list, inspect, retry and resolve. Every request carries a
//! bearer token; every query is scoped to the token's tenant. Errors are
//! `application/problem+json` (RFC 9457) naming the field.
//!
//! One room per concern: [`auth`] (tokens and their cache), [`limits`] (request rates per
//! token and tenant), `intents` (the agent's endpoints), `ops` (the operator's), `health`,
//! [`metrics`], [`problem`] and [`openapi`].

pub mod auth;
mod health;
mod intents;
pub mod limits;
pub mod metrics;
pub mod openapi;
mod ops;
pub mod problem;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::routing::{get, post};
use oncebox_store::Intake;
use sqlx::PgPool;
use tokio::sync::watch;

pub use auth::TOKEN_CACHE_TTL;
pub use intents::MAX_WAIT_SECS;
pub use openapi::OPENAPI;
pub use problem::Problem;

/// Largest accepted request body by default.
pub const DEFAULT_BODY_LIMIT: usize = 256 * 1024;

/// What the handlers share.
pub struct AppState {
    pool: PgPool,
    intake: Intake,
    body_limit: usize,
    done: watch::Receiver<u64>,
    requests: metrics::RequestCounts,
    openapi: Arc<str>,
    tokens: auth::TokenCache,
    limiter: limits::Limiter,
}

impl AppState {
    /// State over `pool` accepting the actions of `intake`, listening for settled intents.
    ///
    /// # Errors
    /// The database's error when the LISTEN connection cannot be opened.
    pub async fn new(
        pool: PgPool,
        intake: Intake,
        body_limit: usize,
    ) -> Result<AppState, sqlx::Error> {
        let done = listen_for_settled(&pool).await?;
        let openapi = openapi::openapi_for(intake.actions());
        Ok(AppState {
            pool,
            intake,
            body_limit,
            done,
            requests: metrics::RequestCounts::default(),
            openapi,
            tokens: auth::TokenCache::default(),
            limiter: limits::Limiter::new(limits::RateLimits::default()),
        })
    }

    /// Limits request rates per token and per tenant with `limits` instead of the defaults.
    pub fn with_rate_limits(mut self, limits: limits::RateLimits) -> AppState {
        self.limiter = limits::Limiter::new(limits);
        self
    }
}

/// A counter bumped whenever intents settle (LISTEN on [`oncebox_store::DONE_CHANNEL`]);
/// long-polls re-read their intent when it changes. The listener reconnects by itself; a
/// notification lost meanwhile only delays a waiter to its timeout.
async fn listen_for_settled(pool: &PgPool) -> Result<watch::Receiver<u64>, sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(oncebox_store::DONE_CHANNEL).await?;
    let (tx, rx) = watch::channel(0u64);
    tokio::spawn(async move {
        loop {
            let heard = listener.recv().await;
            if tx.is_closed() {
                // The server is gone (its state dropped): nobody is waiting.
                return;
            }
            if let Err(e) = heard {
                tracing::warn!(error = %e, "LISTEN for settled intents failed; reconnecting");
            }
            tx.send_modify(|n| *n += 1);
        }
    });
    Ok(rx)
}

/// The router: `/v1/intents…`, `/v1/ops/intents…`, `/healthz`, `/readyz`, `/metrics`,
/// `/openapi.json`.
pub fn router(state: AppState) -> Router {
    let requests = state.requests.clone();
    Router::new()
        .route("/v1/intents", post(intents::submit))
        .route("/v1/intents/{key}", get(intents::read))
        .route("/v1/intents/{key}/cancel", post(intents::cancel))
        .route("/v1/ops/intents", get(ops::ops_list))
        .route("/v1/ops/intents/{key}", get(ops::ops_show))
        .route("/v1/ops/intents/{key}/retry", post(ops::ops_retry))
        .route("/v1/ops/intents/{key}/resolve", post(ops::ops_resolve))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::render))
        .route("/openapi.json", get(serve_openapi))
        .fallback(problem::not_found)
        .method_not_allowed_fallback(problem::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            requests,
            metrics::count,
        ))
        .with_state(Arc::new(state))
}

async fn serve_openapi(State(state): State<Arc<AppState>>) -> impl axum::response::IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        state.openapi.to_string(),
    )
}
