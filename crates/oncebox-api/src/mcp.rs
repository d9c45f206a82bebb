//! `/mcp`: the MCP gateway (`oncebox-mcp`) over streamable HTTP, behind the API's bearer tokens
//! and rate limits — the token's tenant owns the calls — and the host and origin checks the MCP
//! specification asks of HTTP servers (against DNS rebinding): `Host` must be one of the
//! allowed hosts, and a request carrying `Origin` must come from an allowed origin (none by
//! default: agents are not browsers).
//!
//! MCP sessions (`Mcp-Session-Id`) are held in memory, each bound to the token that opened it:
//! a request naming a session another token opened is answered as if the session did not exist
//! (404). At most [`McpMount::max_sessions`] live at once — a new one beyond is refused with 503
//! and `Retry-After` — and one idle for [`SESSION_IDLE`] is closed. A session's `DELETE` is
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
}

/// The sessions of `/mcp`: rmcp's in-memory manager, and which token opened each and when it
/// was last used.
pub(crate) struct Sessions {
    manager: Arc<LocalSessionManager>,
    bound: Mutex<HashMap<String, Bound>>,
    max: usize,
}

struct Bound {
    token: i64,
    seen: Instant,
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
        None if request.method() == Method::POST && g.sessions.sweep().await >= g.sessions.max => {
            return Problem::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{} MCP sessions are open, the most this server keeps; close one (DELETE) \
                     or try again later",
                    g.sessions.max
                ),
            )
            .retry_after(Duration::from_secs(5))
            .field(SESSION_HEADER)
            .into_response();
        }
        None => {}
    }
    let deleting = request.method() == Method::DELETE;
    let token = who.id;
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
                let bound = Bound { token, seen };
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
