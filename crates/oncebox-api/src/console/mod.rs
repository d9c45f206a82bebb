//! `/console`: the operators' web console, served by `oncebox serve` — an overview, the intents
//! that need a person, each intent's whole history with retry, resolve and cancel, search by
//! key or business reference.
//!
//! Security (docs/console.md): an ops token is exchanged at login for a random session id in a
//! cookie (`HttpOnly`, `SameSite=Strict`, `Path=/console`, `Secure` behind TLS); agent tokens are
//! refused. Only the id's SHA-256 is stored (`oncebox.console_sessions`), and a session ends at
//! logout, after [`ConsoleSettings::session_lifetime`], or when its token is revoked or expires.
//! Every state-changing request (login included) carries a CSRF token in the form, compared in
//! constant time with the session's (at login: with the login form's, a server-side record the
//! login page opened and its cookie names; a login without one is refused before its body is
//! read, as is any other form without a session). Pages are
//! HTML rendered on the server with `maud` — a value is text, escaped by its type, unless marked
//! otherwise, and nothing is — and no script at all: the
//! Content-Security-Policy allows scripts from nowhere. Every query is scoped to the token's
//! tenant, as in the API. Every asset is compiled into the binary.

mod html;
pub mod oidc;
mod pages;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use oncebox_store::console::Session;
use oncebox_store::tokens::Role;
use tokio::time::Instant;

use crate::AppState;
use html::Nav;

/// The dead-letter queues' depths, read when the overview is shown: each queue's name and its
/// message count (`None` when it could not be read).
pub type DeadLetterDepths =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Vec<(String, Option<u32>)>> + Send>> + Send + Sync>;

/// How the console is served.
#[derive(Clone)]
pub struct ConsoleSettings {
    /// Each destination with the actions that deliver to it (for the destination filter and
    /// the overview's counts).
    pub destinations: BTreeMap<String, Vec<String>>,
    /// Mark cookies `Secure` (the server speaks TLS); requests that arrived as HTTPS through a
    /// proxy (`X-Forwarded-Proto: https`) get `Secure` cookies regardless.
    pub secure_cookies: bool,
    /// How long a session lasts after login.
    pub session_lifetime: Duration,
    /// Reads the dead-letter queue depths, when the server knows the broker.
    pub dead_letter_depths: Option<DeadLetterDepths>,
    /// Sign-in with an OpenID Connect provider (`[console.oidc]`), beside ops tokens.
    pub oidc: Option<Arc<oidc::OidcSignIn>>,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        ConsoleSettings {
            destinations: BTreeMap::new(),
            secure_cookies: false,
            session_lifetime: DEFAULT_SESSION_LIFETIME,
            dead_letter_depths: None,
            oidc: None,
        }
    }
}

/// A session's default lifetime: a working day.
pub const DEFAULT_SESSION_LIFETIME: Duration = Duration::from_secs(8 * 3600);

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "oncebox_session";
/// The login page's CSRF cookie (before there is a session to hold the token).
pub const LOGIN_COOKIE: &str = "oncebox_login";

/// The Content-Security-Policy of every console response: no script from anywhere, styles and
/// images only from the console itself, forms only to it, never framed.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
                       form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const CSS: &str = include_str!("console.css");

/// The console's routes, behind its security headers.
pub(crate) fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route(Nav::Overview.path(), get(pages::overview))
        .route("/console/", get(|| async { Redirect::to("/console") }))
        .route("/console/login", get(login_page).post(login))
        .route("/console/logout", post(logout))
        .route("/console/oidc/start", get(oidc::start))
        .route("/console/oidc/callback", get(oidc::callback))
        .route(Nav::Approvals.path(), get(pages::approvals))
        .route(Nav::Attention.path(), get(pages::attention))
        .route(Nav::Search.path(), get(pages::search))
        .route("/console/intents/{key}", get(pages::intent))
        .route("/console/intents/{key}/retry", post(pages::retry))
        .route("/console/intents/{key}/resolve", post(pages::resolve))
        .route("/console/intents/{key}/cancel", post(pages::cancel))
        .route("/console/intents/{key}/approve", post(pages::approve))
        .route("/console/intents/{key}/reject", post(pages::reject))
        .route("/console/intents/{key}/originals", post(pages::originals))
        .route("/console/console.css", get(css))
        .with_state(state)
        .layer(axum::middleware::from_fn(security_headers))
}

async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn css() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        CSS,
    )
        .into_response()
}

/// An HTML answer.
pub(crate) fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

/// A page saying what went wrong, with `status`.
pub(crate) fn error_page(status: StatusCode, title: &str, detail: &str) -> Response {
    let body = maud::html! {
        p.error role="alert" { (detail) }
        p { a href="/console" { "Back to the console" } }
    };
    html(status, html::page(title, html::Nav::None, None, body))
}

/// Where a request came from: its connection's peer address (unspecified when the server
/// did not record one), what the console's limits before sign-in key on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Source(pub(crate) std::net::IpAddr);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Source {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Source, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |c| c.0.ip());
        Ok(Source(peer))
    }
}

/// Takes one of `source`'s requests before sign-in (a login page, a sign-in started); the 429
/// page to answer instead when its rate is spent.
pub(crate) fn over_anonymous_rate(state: &AppState, source: Source) -> Option<Response> {
    let refused = state
        .limiter
        .check_anonymous(source.0, Instant::now())
        .is_err();
    refused.then(|| {
        error_page(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many requests",
            "Too many login pages were asked for from this address; wait a moment and reload.",
        )
    })
}

/// The 429 page to answer a login or sign-in from `source` with while its failed logins have
/// emptied its bucket; `None` when it may try.
pub(crate) fn too_many_failures(state: &AppState, source: Source) -> Option<Response> {
    let refused = state
        .limiter
        .check_failures(source.0, Instant::now())
        .is_err();
    refused.then(|| {
        error_page(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many failed logins",
            "Too many logins from this address failed; wait a minute and try again.",
        )
    })
}

/// The value of cookie `name` in the request.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Equal, compared in time independent of where they differ (`subtle`).
fn same(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// A cookie header value: `HttpOnly`, `SameSite=Strict`, on `path`, `Secure` when `secure`.
fn set_cookie(name: &str, value: &str, path: &str, max_age: u64, secure: bool) -> HeaderValue {
    cookie_header(name, value, path, max_age, secure, "Strict")
}

/// A cookie header value as [`set_cookie`] makes it, with `SameSite=same_site`: `Lax` only for
/// a cookie that must come back on a cross-site navigation (an identity provider's redirect).
fn cookie_header(
    name: &str,
    value: &str,
    path: &str,
    max_age: u64,
    secure: bool,
    same_site: &str,
) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite={same_site}{secure}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("invalid=1; Max-Age=0"))
}

/// Whether this request's cookies must be `Secure`.
fn secure(state: &AppState, headers: &HeaderMap) -> bool {
    state.console.secure_cookies
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// The logged-in session of this request (within the token's rate limits), or the answer to
/// give instead: to the login page when there is none.
async fn session(state: &AppState, headers: &HeaderMap) -> Result<Session, Response> {
    let Some(id) = cookie(headers, SESSION_COOKIE).filter(|id| !id.is_empty()) else {
        return Err(Redirect::to("/console/login").into_response());
    };
    let found = oncebox_store::console::session(&state.pool, id)
        .await
        .map_err(internal)?;
    let Some(session) = found.filter(|s| s.role == Role::Ops) else {
        return Err(Redirect::to("/console/login?expired=1").into_response());
    };
    let now = Instant::now();
    let within = match session.token_id {
        Some(id) => state.limiter.check(id, &session.tenant_id, now),
        None => {
            let who = session.principal.to_string();
            state.limiter.check_person(&who, &session.tenant_id, now)
        }
    };
    if within.is_err() {
        return Err(error_page(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many requests",
            "You are over your request rate; wait a moment and reload.",
        ));
    }
    Ok(session)
}

/// The signed-in operator of a console page: a handler that takes it runs only for a live ops
/// session within its request rate; otherwise the extractor answers (the sign-in page, or the
/// 429 page), so no handler repeats the check.
pub(crate) struct Signed(pub(crate) Session);

impl axum::extract::FromRequestParts<Arc<AppState>> for Signed {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Response> {
        session(state, &parts.headers).await.map(Signed)
    }
}

/// The session of a state-changing request, then its form, which must carry the session's CSRF
/// token; a 403 page when the token is missing or wrong. The body is read only once the session
/// is known: a request without one is answered without reading it.
pub(crate) async fn checked_session(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Session, HashMap<String, String>), Response> {
    let session = session(state, headers).await?;
    let form = read_form(body).await.map_err(|page| *page)?;
    match form.get("csrf") {
        Some(token) if same(token, &session.csrf) => Ok((session, form)),
        _ => Err(csrf_refused()),
    }
}

fn csrf_refused() -> Response {
    error_page(
        StatusCode::FORBIDDEN,
        "Refused",
        "This request did not carry the console's CSRF token (field csrf): it did not come \
         from a console page of this session. Nothing was changed.",
    )
}

/// A database failure as a 500 page (the detail goes to the log, not the page).
pub(crate) fn internal(e: sqlx::Error) -> Response {
    tracing::error!(error = %e, "console: database error");
    error_page(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Something went wrong",
        "The database did not answer as expected; the server's log says more.",
    )
}

/// The largest console form accepted.
const FORM_LIMIT: usize = 16 * 1024;

/// A form body (`application/x-www-form-urlencoded`, at most [`FORM_LIMIT`]) as a map, or the
/// page to answer instead (boxed: a response is large): 413 when too long, 408 when it does not
/// arrive in time, 400 when a field holds U+0000.
pub(crate) async fn read_form(body: Body) -> Result<HashMap<String, String>, Box<Response>> {
    let bytes = axum::body::to_bytes(body, FORM_LIMIT).await.map_err(|e| {
        Box::new(if oncebox_serve::timed_out(&e) {
            error_page(
                StatusCode::REQUEST_TIMEOUT,
                "Too slow",
                "The form did not arrive in time. Nothing was changed; send it again.",
            )
        } else {
            error_page(
                StatusCode::PAYLOAD_TOO_LARGE,
                "Too large",
                "The form is larger than the console accepts. Nothing was changed.",
            )
        })
    })?;
    let form: HashMap<String, String> = form_urlencoded::parse(&bytes).into_owned().collect();
    if let Some(field) = form
        .iter()
        .find_map(|(k, v)| (k.contains('\0') || v.contains('\0')).then_some(k))
    {
        return Err(Box::new(error_page(
            StatusCode::BAD_REQUEST,
            "Bad request",
            &format!("{field}: must not hold U+0000. Nothing was changed."),
        )));
    }
    Ok(form)
}

async fn login_page(
    State(state): State<Arc<AppState>>,
    source: Source,
    headers: HeaderMap,
    query: axum::extract::Query<HashMap<String, String>>,
) -> Response {
    let note = maud::html! {
        @if query.contains_key("expired") {
            p.note role="status" { "Your session ended; log in again." }
        }
    };
    login_form(&state, source, &headers, StatusCode::OK, note).await
}

/// The login page with a fresh login form (`oncebox_store::console::create_login`): its id in a
/// cookie, its CSRF token in the form. Login pages are served at the anonymous rate of their
/// source, under a ceiling for all sources together ([`crate::limits::RateLimits::anonymous`]):
/// each one is a row until it is used or expires.
async fn login_form(
    state: &AppState,
    source: Source,
    headers: &HeaderMap,
    status: StatusCode,
    note: maud::Markup,
) -> Response {
    if let Some(page) = over_anonymous_rate(state, source) {
        return page;
    }
    let (id, csrf) = match oncebox_store::console::create_login(&state.pool).await {
        Ok(created) => created,
        Err(e) => return internal(e),
    };
    let body = maud::html! {
        (note)
        @if let Some(provider) = &state.console.oidc {
            p.sign-in {
                a.button href="/console/oidc/start" { "Sign in with " (provider.name()) }
            }
            p.hint { "Or log in with an ops token:" }
        }
        form.login method="post" action="/console/login" {
            input type="hidden" name="csrf" value=(csrf);
            label for="token" { "Ops token" }
            input id="token" name="token" type="password" autocomplete="off" required
                placeholder="obx_…";
            button type="submit" { "Log in" }
            p.hint {
                "An ops token from " code { "oncebox ops token create --role ops" } ". "
                "Agent tokens cannot use the console."
            }
        }
    };
    let mut response = html(status, html::page("Log in", html::Nav::None, None, body));
    let lifetime = oncebox_store::console::LOGIN_FORM_LIFETIME.as_secs();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(
            LOGIN_COOKIE,
            &id,
            "/console/login",
            lifetime,
            secure(state, headers),
        ),
    );
    response
}

/// A login is taken only for a login form this server served (its cookie names it), once: a
/// login without one is answered with a new form before its body is read. Then the form's CSRF
/// token must be that form's, the token an ops token within its request rate.
async fn login(
    State(state): State<Arc<AppState>>,
    source: Source,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let alert = |why: &str| maud::html! { p.error role="alert" { (why) } };
    if let Some(page) = too_many_failures(&state, source) {
        return page;
    }
    let login_id = cookie(&headers, LOGIN_COOKIE).filter(|id| !id.is_empty());
    let csrf = match login_id {
        None => None,
        Some(id) => match oncebox_store::console::take_login(&state.pool, id).await {
            Ok(csrf) => csrf,
            Err(e) => return internal(e),
        },
    };
    let Some(csrf) = csrf else {
        let expired = alert("The login form expired or was already used; log in again.");
        return login_form(&state, source, &headers, StatusCode::FORBIDDEN, expired).await;
    };
    let form = match read_form(body).await {
        Ok(f) => f,
        Err(page) => return *page,
    };
    match form.get("csrf") {
        Some(token) if same(token, &csrf.csrf) => {}
        _ => return csrf_refused(),
    }
    let token = form.get("token").map(|t| t.trim()).unwrap_or_default();
    let who = match ops_caller(&state, token).await {
        Ok(who) => who,
        Err(Refusal::Database(e)) => return internal(e),
        Err(Refusal::Login(status, why)) => {
            if status != StatusCode::TOO_MANY_REQUESTS {
                state.limiter.failed(source.0, Instant::now());
            }
            return login_form(&state, source, &headers, status, alert(why)).await;
        }
    };
    let lifetime = state.console.session_lifetime;
    match oncebox_store::console::create_session(&state.pool, &who, lifetime).await {
        Ok((id, _csrf)) => {
            tracing::info!(principal = %who.principal(), tenant = %who.tenant_id, "console login");
            signed_in(&state, &headers, &id)
        }
        Err(e) => internal(e),
    }
}

/// Why a login was refused.
enum Refusal {
    /// Refused with this status and reason (naming the field).
    Login(StatusCode, &'static str),
    /// The database failed.
    Database(sqlx::Error),
}

/// The caller of `token`, which must be a live ops token within its request rate.
async fn ops_caller(
    state: &AppState,
    token: &str,
) -> Result<oncebox_store::tokens::Caller, Refusal> {
    if token.is_empty() {
        return Err(Refusal::Login(
            StatusCode::BAD_REQUEST,
            "token: enter an ops token.",
        ));
    }
    let who = oncebox_store::tokens::authenticate(&state.pool, token)
        .await
        .map_err(Refusal::Database)?
        .ok_or(Refusal::Login(
            StatusCode::UNAUTHORIZED,
            "token: unknown, revoked or expired.",
        ))?;
    if who.role != Role::Ops {
        return Err(Refusal::Login(
            StatusCode::FORBIDDEN,
            "token: this is an agent token; the console needs an ops token.",
        ));
    }
    if state
        .limiter
        .check(who.id, &who.tenant_id, Instant::now())
        .is_err()
    {
        return Err(Refusal::Login(
            StatusCode::TOO_MANY_REQUESTS,
            "token: over its request rate; wait a moment and log in again.",
        ));
    }
    Ok(who)
}

/// The answer to a login that opened session `id`: its cookie set, the login form's cleared,
/// on to the overview.
fn signed_in(state: &AppState, headers: &HeaderMap, id: &str) -> Response {
    let lifetime = state.console.session_lifetime;
    let secure = secure(state, headers);
    let mut response = Redirect::to("/console").into_response();
    let h = response.headers_mut();
    h.append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, id, "/console", lifetime.as_secs(), secure),
    );
    h.append(
        header::SET_COOKIE,
        set_cookie(LOGIN_COOKIE, "", "/console/login", 0, secure),
    );
    response
}

async fn logout(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    if let Err(answer) = checked_session(&state, &headers, body).await {
        return answer;
    }
    if let Some(id) = cookie(&headers, SESSION_COOKIE)
        && let Err(e) = oncebox_store::console::end_session(&state.pool, id).await
    {
        return internal(e);
    }
    let mut response = Redirect::to("/console/login").into_response();
    response.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SESSION_COOKIE, "", "/console", 0, secure(&state, &headers)),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_name_and_compared_whole() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; oncebox_session=abc"),
        );
        h.append(header::COOKIE, HeaderValue::from_static("b=2"));
        assert_eq!(cookie(&h, SESSION_COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "b"), Some("2"));
        assert_eq!(cookie(&h, "oncebox"), None);
        assert!(same("abc", "abc"));
        assert!(!same("abc", "abd"));
        assert!(!same("abc", "ab"));
    }

    #[test]
    fn session_cookies_are_http_only_strict_and_secure_behind_tls() {
        let plain = set_cookie(SESSION_COOKIE, "x", "/console", 60, false);
        let plain = plain.to_str().expect("ascii");
        assert!(
            plain.contains("HttpOnly") && plain.contains("SameSite=Strict"),
            "{plain}"
        );
        assert!(!plain.contains("Secure"), "{plain}");
        let tls = set_cookie(SESSION_COOKIE, "x", "/console", 60, true);
        assert!(tls.to_str().expect("ascii").ends_with("; Secure"));
    }
}
