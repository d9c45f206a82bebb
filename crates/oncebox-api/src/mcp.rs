//! `/mcp`: the MCP gateway (`oncebox-mcp`) over streamable HTTP, behind the API's bearer tokens
//! and rate limits — the token's tenant owns the calls — and the host and origin checks the MCP
//! specification asks of HTTP servers (against DNS rebinding): `Host` must be one of the
//! allowed hosts, and a request carrying `Origin` must come from an allowed origin (none by
//! default: agents are not browsers).
//!
//! MCP sessions (`Mcp-Session-Id`) are held in memory, each bound to the token that opened it:
//! a request naming a session another token opened is answered as if the session did not exist
//! (404). At most [`McpMount::max_sessions`] live at once — a new one beyond is refused with 503
//! and `Retry-After` — and at most [`McpMount::max_sessions_per_token`] of one token and
//! [`McpMount::max_sessions_per_tenant`] of one tenant — beyond, 429 with `Retry-After` — so
//! that one agent filling the server cannot lock every other tenant out; one idle for
//! [`SESSION_IDLE`] is closed. A session's `DELETE` is
//! answered 204. Bodies are held to the API's `--body-limit`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

use crate::AppState;
use crate::auth::caller;
use crate::problem::Problem;

/// Live MCP sessions allowed by default (each holds a few tens of KiB).
pub const DEFAULT_MAX_SESSIONS: usize = 1000;

/// Live MCP sessions one token may hold by default.
pub const DEFAULT_MAX_SESSIONS_PER_TOKEN: usize = 50;

/// Live MCP sessions the tokens of one tenant may hold together by default.
pub const DEFAULT_MAX_SESSIONS_PER_TENANT: usize = 200;

/// A session that has seen no request for this long is closed.
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

const SESSION_HEADER: &str = "mcp-session-id";

/// How `/mcp` is served.
pub struct McpMount {
    /// The gateway (its tenancy must be [`oncebox_mcp::Tenancy::PerRequest`]).
    pub gateway: oncebox_mcp::Gateway,
    /// `Host` values accepted (`host` or `host:port`); loopback names when empty.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted (`https://app.example.com:443`); none when empty.
    pub allowed_origins: Vec<String>,
    /// MCP sessions live at once, at most.
    pub max_sessions: usize,
    /// MCP sessions one token may hold at once, at most.
    pub max_sessions_per_token: usize,
    /// MCP sessions the tokens of one tenant may hold at once, at most.
    pub max_sessions_per_tenant: usize,
}

/// The sessions of `/mcp`: rmcp's in-memory manager, and which token opened each and when it
/// was last used.
pub(crate) struct Sessions {
    manager: Arc<LocalSessionManager>,
    bound: Mutex<HashMap<String, Bound>>,
    max: usize,
    per_token: usize,
    per_tenant: usize,
}

struct Bound {
    token: i64,
    tenant: String,
    seen: Instant,
}

/// Why a new session is refused.
enum Full {
    /// Every session the server keeps is open.
    Server(usize),
    /// The caller's token holds as many as it may.
    Token(usize),
    /// The caller's tenant holds as many as it may.
    Tenant(usize),
}

/// Whether a request may use the session it names.
enum Use {
    /// The session is this token's (or unknown here: rmcp answers for it).
    Allowed,
    /// Another token opened it.
    Refused,
}

impl Sessions {
    fn bound(&self) -> MutexGuard<'_, HashMap<String, Bound>> {
        self.bound.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Ends the sessions idle for [`SESSION_IDLE`]; returns how many stay open.
    async fn sweep(&self) -> usize {
        let now = Instant::now();
        let idle: Vec<String> = {
            let mut bound = self.bound();
            let idle: Vec<String> = bound
                .iter()
                .filter(|(_, b)| now - b.seen >= SESSION_IDLE)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &idle {
                bound.remove(id);
            }
            idle
        };
        for id in idle {
            if let Err(e) = self.manager.close_session(&Arc::from(id.as_str())).await {
                tracing::debug!(error = %e, "closing an idle MCP session failed");
            }
        }
        self.bound().len()
    }

    /// Whether `caller` may open one more session: the server's, the token's and the tenant's
    /// caps, counted after idle sessions are closed.
    async fn room_for(&self, caller: &oncebox_store::tokens::Caller) -> Result<(), Full> {
        let open = self.sweep().await;
        if open >= self.max {
            return Err(Full::Server(self.max));
        }
        let bound = self.bound();
        let of_token = bound.values().filter(|b| b.token == caller.id).count();
        if of_token >= self.per_token {
            return Err(Full::Token(self.per_token));
        }
        let of_tenant = bound
            .values()
            .filter(|b| b.tenant == caller.tenant_id)
            .count();
        if of_tenant >= self.per_tenant {
            return Err(Full::Tenant(self.per_tenant));
        }
        Ok(())
    }

    /// Notes a request of `token` in session `id`.
    fn touch(&self, id: &str, token: i64) -> Use {
        match self.bound().get_mut(id) {
            Some(b) if b.token != token => Use::Refused,
            Some(b) => {
                b.seen = Instant::now();
                Use::Allowed
            }
            None => Use::Allowed,
        }
    }
}

/// The tower service answering `/mcp`, and its sessions.
pub(crate) fn service(
    mount: McpMount,
    body_limit: usize,
) -> (
    StreamableHttpService<oncebox_mcp::Gateway, LocalSessionManager>,
    Arc<Sessions>,
) {
    // A tool call's answer is one message (the gateway sends no progress): plain JSON, not an
    // event stream, where the client negotiated no session.
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_origins(mount.allowed_origins)
        .enforce_origin_validation()
        .with_json_response(true)
        .with_max_request_body_bytes(body_limit);
    if !mount.allowed_hosts.is_empty() {
        config = config.with_allowed_hosts(mount.allowed_hosts);
    }
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = Some(SESSION_IDLE);
    let manager = Arc::new(manager);
    let sessions = Arc::new(Sessions {
        manager: manager.clone(),
        bound: Mutex::new(HashMap::new()),
        max: mount.max_sessions.max(1),
        per_token: mount.max_sessions_per_token.max(1),
        per_tenant: mount.max_sessions_per_tenant.max(1),
    });
    let gateway = mount.gateway;
    let service = StreamableHttpService::new(move || Ok(gateway.clone()), manager, config);
    (service, sessions)
}

/// What the guard of `/mcp` needs.
#[derive(Clone)]
pub(crate) struct Guard {
    pub(crate) state: Arc<AppState>,
    pub(crate) sessions: Arc<Sessions>,
}

/// Authenticates the bearer token (within its rate limits) and hands the caller to the gateway
/// in the request's extensions; keeps each session to the token that opened it, and the number
/// of sessions to the cap. A problem document (401, 404, 429, 503) otherwise.
pub(crate) async fn guard(State(g): State<Guard>, mut request: Request, next: Next) -> Response {
    let who = match caller(&g.state, request.headers()).await {
        Ok(who) => who,
        Err(problem) => return problem.into_response(),
    };
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match &session {
        Some(id) => {
            if let Use::Refused = g.sessions.touch(id, who.id) {
                return Problem::new(StatusCode::NOT_FOUND, "no such MCP session")
                    .field(SESSION_HEADER)
                    .into_response();
            }
        }
        None if request.method() == Method::POST => {
            if let Err(full) = g.sessions.room_for(&who).await {
                return refused(full);
            }
        }
        None => {}
    }
    let deleting = request.method() == Method::DELETE;
    let (token, tenant) = (who.id, who.tenant_id.clone());
    request.extensions_mut().insert(who);
    // The body is read here, within the API's limits (413 past --body-limit, 408 when it does
    // not arrive in time), before the gateway sees it.
    let (parts, body) = request.into_parts();
    let body = match crate::problem::read_body(body, g.state.body_limit).await {
        Ok(bytes) => axum::body::Body::from(bytes),
        Err(problem) => return problem.into_response(),
    };
    let request = Request::from_parts(parts, body);
    let mut response = next.run(request).await;
    match (&session, response.headers().get(SESSION_HEADER)) {
        (None, Some(opened)) => {
            if let Ok(opened) = opened.to_str() {
                let seen = Instant::now();
                let bound = Bound {
                    token,
                    tenant,
                    seen,
                };
                g.sessions.bound().insert(opened.to_owned(), bound);
            }
        }
        (Some(id), _) if deleting && response.status().is_success() => {
            g.sessions.bound().remove(id);
            // rmcp answers 202; clients expect 200 or 204 for a session ended.
            *response.status_mut() = StatusCode::NO_CONTENT;
            *response.body_mut() = axum::body::Body::empty();
        }
        _ => {}
    }
    response
}

/// The answer to a new session refused: 503 when the server is full, 429 when the caller's
/// token or tenant holds its share.
fn refused(full: Full) -> Response {
    let (status, detail) = match full {
        Full::Server(n) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{n} MCP sessions are open, the most this server keeps"),
        ),
        Full::Token(n) => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("this token holds {n} MCP sessions, the most one token may"),
        ),
        Full::Tenant(n) => (
            StatusCode::TOO_MANY_REQUESTS,
            format!("this tenant's tokens hold {n} MCP sessions, the most one tenant may"),
        ),
    };
    Problem::new(
        status,
        format!("{detail}; close one (DELETE) or try again later"),
    )
    .retry_after(Duration::from_secs(5))
    .field(SESSION_HEADER)
    .into_response()
}
