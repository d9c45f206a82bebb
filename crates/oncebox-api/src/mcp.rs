//! `/mcp`: the MCP gateway (`oncebox-mcp`) over streamable HTTP, behind the API's bearer tokens
//! and rate limits — the token's tenant owns the calls — and the host and origin checks the MCP
//! specification asks of HTTP servers (against DNS rebinding): `Host` must be one of the
//! allowed hosts, and a request carrying `Origin` must come from an allowed origin (none by
//! default: agents are not browsers).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::AppState;
use crate::auth::caller;

/// How `/mcp` is served.
pub struct McpMount {
    /// The gateway (its tenancy must be [`oncebox_mcp::Tenancy::PerRequest`]).
    pub gateway: oncebox_mcp::Gateway,
    /// `Host` values accepted (`host` or `host:port`); loopback names when empty.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (`https://app.example.com:443`); none when empty.
    pub allowed_origins: Vec<String>,
}

/// The tower service answering `/mcp`.
pub(crate) fn service(
    mount: McpMount,
) -> StreamableHttpService<oncebox_mcp::Gateway, LocalSessionManager> {
    // A tool call's answer is one message (the gateway sends no progress): plain JSON, not an
    // event stream, where the client negotiated no session.
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_origins(mount.allowed_origins)
        .enforce_origin_validation()
        .with_json_response(true);
    if !mount.allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(mount.allowed_hosts);
    }
    let gateway = mount.gateway;
    StreamableHttpService::new(
        move || Ok(gateway.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Authenticates the bearer token (within its rate limits) and hands the caller to the gateway
/// in the request's extensions; a problem document (401, 429) otherwise.
pub(crate) async fn authenticate(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    match caller(&state, request.headers()).await {
        Ok(who) => {
            request.extensions_mut().insert(who);
            next.run(request).await
        }
        Err(problem) => problem.into_response(),
    }
}
