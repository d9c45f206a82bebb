//! The agent-facing HTTP API (docs/architecture.md, "Interfaces"): orchestrators that do not
//! share oncebox's database submit intents with an `Idempotency-Key`, read results (with
//! long-poll) and cancel; operators list, inspect, retry and resolve. Every request carries a
//! bearer token; every query is scoped to the token's tenant. Errors are
//! `application/problem+json` (RFC 9457) naming the field.
//!
//! One room per concern: [`auth`] (tokens and their cache), [`limits`] (request rates per
//! token and tenant), `intent` (the view of an intent and the lookup of the caller's, a leaf),
//! `intents` (the agent's endpoints), `ops` (the operator's), [`console`]
//! (the operators' web pages), `health`, [`metrics`], [`problem`] and [`openapi`].

pub mod auth;
pub mod console;
mod health;
mod intent;
mod intents;
pub mod limits;
mod mcp;
pub mod metrics;
pub mod openapi;
mod ops;
pub mod problem;

use std::sync::Arc;

use axum::Router;
use oncebox_store::Intake;
use sqlx::PgPool;
use tokio::sync::watch;

pub use auth::TOKEN_CACHE_TTL;
pub use console::ConsoleSettings;
pub use intents::MAX_WAIT_SECS;
pub use mcp::{
    DEFAULT_MAX_SESSIONS, DEFAULT_MAX_SESSIONS_PER_TENANT, DEFAULT_MAX_SESSIONS_PER_TOKEN,
    McpMount, SESSION_IDLE,
};
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
    console: ConsoleSettings,
    readiness: oncebox_store::ReadinessCheck,
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
        let done = oncebox_store::listen_for_settled(&pool).await?;
        let openapi = openapi::document(intake.actions());
        let readiness = oncebox_store::ReadinessCheck::new((*pool.connect_options()).clone());
        Ok(AppState {
            pool,
            intake,
            body_limit,
            done,
            requests: metrics::RequestCounts::default(),
            openapi,
            tokens: auth::TokenCache::default(),
            limiter: limits::Limiter::new(limits::RateLimits::default()),
            console: ConsoleSettings::default(),
            readiness,
        })
    }

    /// The counter of settled intents this state listens to (for the MCP gateway, so that a
    /// server holds one LISTEN connection, not one per waiter kind).
    pub fn settled(&self) -> watch::Receiver<u64> {
        self.done.clone()
    }

    /// Serves the console (`/console`) with `settings` instead of the defaults.
    pub fn with_console(mut self, settings: ConsoleSettings) -> AppState {
        self.console = settings;
        self
    }

    /// Limits request rates per token and per tenant with `limits` instead of the defaults.
    pub fn with_rate_limits(mut self, limits: limits::RateLimits) -> AppState {
        self.limiter = limits::Limiter::new(limits);
        self
    }
}

/// The router: `/v1/intents…`, `/v1/ops/intents…`, `/console…`, `/healthz`, `/readyz`,
/// `/metrics`, `/openapi.json`.
pub fn router(state: AppState) -> Router {
    router_with_mcp(state, None)
}

/// [`router`], and `/mcp` (the MCP gateway over streamable HTTP) when `mcp` is given.
pub fn router_with_mcp(state: AppState, mcp: Option<McpMount>) -> Router {
    let requests = state.requests.clone();
    let state = Arc::new(state);
    let (api, _) = openapi::routes().split_for_parts();
    let mut router = api
        .fallback(problem::not_found)
        .method_not_allowed_fallback(problem::method_not_allowed)
        .with_state(state.clone())
        .merge(console::routes(state.clone()));
    if let Some(mount) = mcp {
        let (service, sessions) = mcp::service(mount, state.body_limit);
        let gateway = Router::new().route_service("/mcp", service).layer(
            axum::middleware::from_fn_with_state(mcp::Guard { state, sessions }, mcp::guard),
        );
        router = router.merge(gateway);
    }
    router.layer(axum::middleware::from_fn_with_state(
        requests,
        metrics::count,
    ))
}
