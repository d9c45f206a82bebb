//! Sign-in with OpenID Connect (`[console.oidc]`): the authorization code flow with PKCE,
//! through the `openidconnect` crate — discovery, the provider's keys, and every check of the
//! ID token (signature, issuer, audience, expiry, `nonce`) are its; this module keeps the flow's
//! secrets on the server, bounds the clock skew, and maps the person's groups to a tenant and a
//! role.
//!
//! `GET /console/oidc/start` opens a sign-in (a login form whose CSRF token is the `state`,
//! kept with the `nonce` and the PKCE verifier, its id in a cookie) and sends the browser to the
//! provider. `GET /console/oidc/callback` takes that sign-in once — a replayed `state` finds
//! nothing — exchanges the code, checks the ID token, and opens a session for the principal
//! `oidc:ISSUER#SUBJECT`, shown with the person's e-mail. The provider is discovered afresh at
//! each step (sign-ins are rare), so its rotated keys are always the ones checked against.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use chrono::Utc;
use oncebox_core::Principal;
use oncebox_core::config::{ConsoleRole, OidcConfig};
use oncebox_store::console::{SignInSecrets, SignedIn};
use oncebox_store::tokens::Role;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet,
    EndpointSet, IssuerUrl, Nonce, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    TokenResponse as _,
};
use serde::Deserialize;
use tokio::time::Instant;

use super::{
    Source, cookie, cookie_header, error_page, internal, over_anonymous_rate, same, set_cookie,
    signed_in, too_many_failures,
};
use crate::AppState;

/// The sign-in's cookie: the id of the login form that holds its secrets.
pub const SIGN_IN_COOKIE: &str = "oncebox_sign_in";

/// How long a request to the provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest answer read from the provider.
const MAX_ANSWER: usize = 1024 * 1024;

type Client = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// A configured provider, and the client secret read from the environment.
pub struct OidcSignIn {
    config: OidcConfig,
    secret: String,
    http: reqwest::Client,
}

/// Why the console cannot sign people in with the configured provider.
#[derive(Debug, thiserror::Error)]
pub enum OidcSetupError {
    /// The variable that should hold the client secret is unset or empty.
    #[error("{0}: set it to the console's client secret at the OpenID provider")]
    MissingSecret(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client for the OpenID provider: {0}")]
    Client(String),
}

impl OidcSignIn {
    /// Sign-in with the provider `config` names, its client secret read from the variable it
    /// names (a TLS crypto provider must be installed process-wide for an https issuer).
    ///
    /// # Errors
    /// [`OidcSetupError`] naming the variable when the secret is missing.
    pub fn new(config: OidcConfig) -> Result<OidcSignIn, OidcSetupError> {
        let secret = std::env::var(&config.client_secret_env).unwrap_or_default();
        if secret.trim().is_empty() {
            return Err(OidcSetupError::MissingSecret(
                config.client_secret_env.clone(),
            ));
        }
        // No redirect is followed: a provider's endpoint that redirects is not one to trust
        // with a code (and following one would let it aim this server at another host).
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(PROVIDER_TIMEOUT)
            .build()
            .map_err(|e| OidcSetupError::Client(e.to_string()))?;
        Ok(OidcSignIn {
            config,
            secret,
            http,
        })
    }

    /// The provider's name, for the sign-in button.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The client, from the provider's discovery document (fetched now).
    async fn client(&self) -> Result<Client, String> {
        let issuer = IssuerUrl::new(self.config.issuer.as_str().to_owned())
            .map_err(|e| format!("issuer: {e}"))?;
        let metadata = CoreProviderMetadata::discover_async(issuer, &Http(self.http.clone()))
            .await
            .map_err(|e| format!("discovery failed: {}", chain(&e)))?;
        let redirect = RedirectUrl::new(self.config.redirect_url.as_str().to_owned())
            .map_err(|e| format!("redirect_url: {e}"))?;
        Ok(CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            Some(ClientSecret::new(self.secret.clone())),
        )
        .set_redirect_uri(redirect))
    }
}

/// The HTTP client the `openidconnect` crate calls the provider with.
struct Http(reqwest::Client);

impl<'c> openidconnect::AsyncHttpClient<'c> for Http {
    type Error = ProviderError;
    type Future = std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<openidconnect::HttpResponse, ProviderError>>
                + Send
                + 'c,
        >,
    >;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        let http = self.0.clone();
        Box::pin(async move { send(&http, request).await })
    }
}

/// One request to the provider over `http`, its answer cut at [`MAX_ANSWER`].
async fn send(
    http: &reqwest::Client,
    request: openidconnect::HttpRequest,
) -> Result<openidconnect::HttpResponse, ProviderError> {
    let (parts, body) = request.into_parts();
    let answer = http
        .request(parts.method, parts.uri.to_string())
        .headers(parts.headers)
        .body(body)
        .send()
        .await
        .map_err(|e| ProviderError(e.to_string()))?;
    let mut response = axum::http::Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        response = response.header(name, value);
    }
    let mut body = Vec::new();
    let mut answer = answer;
    while let Some(chunk) = answer
        .chunk()
        .await
        .map_err(|e| ProviderError(e.to_string()))?
    {
        if body.len() + chunk.len() > MAX_ANSWER {
            return Err(ProviderError("the answer is too large".into()));
        }
        body.extend_from_slice(&chunk);
    }
    response
        .body(body)
        .map_err(|e| ProviderError(e.to_string()))
}

/// A request to the provider that got no usable answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProviderError(String);

/// `e` and its sources as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn not_configured() -> Response {
    error_page(
        StatusCode::NOT_FOUND,
        "Not found",
        "No OpenID provider is configured.",
    )
}

fn refused(status: StatusCode, detail: &str) -> Response {
    let mut page = error_page(status, "Sign-in refused", detail);
    page.headers_mut().append(
        header::SET_COOKIE,
        set_cookie(SIGN_IN_COOKIE, "", "/console/oidc", 0, false),
    );
    page
}

/// `GET /console/oidc/start`: a new sign-in, and the browser sent to the provider.
pub(crate) async fn start(
    State(state): State<Arc<AppState>>,
    source: Source,
    headers: HeaderMap,
) -> Response {
    let Some(oidc) = state.console.oidc.as_deref() else {
        return not_configured();
    };
    if let Some(page) = over_anonymous_rate(&state, source) {
        return page;
    }
    let client = match oidc.client().await {
        Ok(c) => c,
        Err(why) => return provider_down(&why),
    };
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let secrets = SignInSecrets {
        nonce: Nonce::new_random().secret().clone(),
        pkce_verifier: verifier.secret().clone(),
    };
    let (id, csrf) = match oncebox_store::console::create_sign_in(&state.pool, &secrets).await {
        Ok(created) => created,
        Err(e) => return internal(e),
    };
    let nonce = secrets.nonce.clone();
    let mut request = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            move || CsrfToken::new(csrf.clone()),
            move || Nonce::new(nonce.clone()),
        )
        .set_pkce_challenge(challenge);
    for scope in &oidc.config.scopes {
        request = request.add_scope(Scope::new(scope.clone()));
    }
    let (url, _, _) = request.url();
    let mut response = Redirect::to(url.as_str()).into_response();
    // Lax, not Strict: the provider sends the browser back with a cross-site navigation, on
    // which a Strict cookie would not be sent. It names only a one-time sign-in record.
    let lifetime = oncebox_store::console::LOGIN_FORM_LIFETIME.as_secs();
    let secure = super::secure(&state, &headers);
    let cookie = cookie_header(
        SIGN_IN_COOKIE,
        &id,
        "/console/oidc",
        lifetime,
        secure,
        "Lax",
    );
    response.headers_mut().append(header::SET_COOKIE, cookie);
    response
}

fn provider_down(why: &str) -> Response {
    tracing::warn!(
        error = why,
        "console: the OpenID provider did not answer as expected"
    );
    error_page(
        StatusCode::BAD_GATEWAY,
        "Sign-in unavailable",
        "The identity provider did not answer as expected; try again, or log in with an ops \
         token. The server's log says more.",
    )
}

/// What the provider sends the browser back with.
#[derive(Deserialize)]
pub(crate) struct Callback {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
}

/// `GET /console/oidc/callback`: the sign-in taken once, the code exchanged, the ID token
/// checked, and a session opened for the person.
pub(crate) async fn callback(
    State(state): State<Arc<AppState>>,
    source: Source,
    headers: HeaderMap,
    Query(answer): Query<Callback>,
) -> Response {
    let Some(oidc) = state.console.oidc.as_deref() else {
        return not_configured();
    };
    if let Some(page) = too_many_failures(&state, source) {
        return page;
    }
    let taken = match cookie(&headers, SIGN_IN_COOKIE).filter(|id| !id.is_empty()) {
        None => None,
        Some(id) => match oncebox_store::console::take_login(&state.pool, id).await {
            Ok(taken) => taken,
            Err(e) => return internal(e),
        },
    };
    let fail = |status, why: &str| {
        state.limiter.failed(source.0, Instant::now());
        tracing::info!(reason = why, "console: OpenID sign-in refused");
        refused(status, why)
    };
    let Some((csrf, secrets)) = taken.and_then(|t| Some(t.csrf).zip(t.sign_in)) else {
        return fail(
            StatusCode::FORBIDDEN,
            "This sign-in was already used, expired, or was not started here; sign in again.",
        );
    };
    if !answer.state.as_deref().is_some_and(|s| same(s, &csrf)) {
        return fail(
            StatusCode::FORBIDDEN,
            "state: this answer is not for this sign-in.",
        );
    }
    if let Some(error) = &answer.error {
        let why = format!("The identity provider refused the sign-in ({error}).");
        return fail(StatusCode::FORBIDDEN, &why);
    }
    let Some(code) = answer.code else {
        return fail(StatusCode::BAD_REQUEST, "code: the provider sent no code.");
    };
    let person = match verified(oidc, code, &secrets).await {
        Ok(person) => person,
        Err(Check::Provider(why)) => return provider_down(&why),
        Err(Check::Refused(why)) => return fail(StatusCode::FORBIDDEN, &why),
    };
    let lifetime = state.console.session_lifetime;
    match oncebox_store::console::create_person_session(&state.pool, &person, lifetime).await {
        Ok((id, _csrf)) => {
            tracing::info!(principal = %person.principal, tenant = %person.tenant_id, "console sign-in");
            let mut response = signed_in(&state, &headers, &id);
            response.headers_mut().append(
                header::SET_COOKIE,
                set_cookie(SIGN_IN_COOKIE, "", "/console/oidc", 0, false),
            );
            response
        }
        Err(e) => internal(e),
    }
}

/// Why an answer from the provider did not sign anyone in.
enum Check {
    /// The provider could not be reached or answered nonsense.
    Provider(String),
    /// The answer was refused: the token failed a check, or the person maps to no tenant.
    Refused(String),
}

/// Exchanges `code` with the sign-in's PKCE verifier, checks the ID token against the
/// sign-in's nonce, and maps the person's groups.
async fn verified(
    oidc: &OidcSignIn,
    code: String,
    secrets: &SignInSecrets,
) -> Result<SignedIn, Check> {
    let client = oidc.client().await.map_err(Check::Provider)?;
    let http = Http(oidc.http.clone());
    let tokens = client
        .exchange_code(AuthorizationCode::new(code))
        .map_err(|e| Check::Provider(e.to_string()))?
        .set_pkce_verifier(PkceCodeVerifier::new(secrets.pkce_verifier.clone()))
        .request_async(&http)
        .await
        .map_err(|e| Check::Refused(format!("the code was not accepted: {}", chain(&e))))?;
    let id_token = tokens
        .id_token()
        .ok_or_else(|| Check::Refused("the provider sent no ID token".into()))?;
    let skew = chrono::TimeDelta::from_std(oidc.config.max_clock_skew.0)
        .unwrap_or(chrono::TimeDelta::minutes(1));
    // Expiry is checked against a clock `skew` behind this one (a token that expired less than
    // `skew` ago passes); a token issued more than `skew` in the future is refused.
    let verifier = client
        .id_token_verifier()
        .set_time_fn(move || Utc::now() - skew)
        .set_issue_time_verifier_fn(move |iat| {
            if iat > Utc::now() + skew {
                Err(format!("issued in the future ({iat})"))
            } else {
                Ok(())
            }
        });
    let nonce = Nonce::new(secrets.nonce.clone());
    let claims = id_token
        .claims(&verifier, &nonce)
        .map_err(|e| Check::Refused(format!("the ID token was refused: {}", chain(&e))))?;
    let principal = Principal::oidc(claims.issuer().as_str(), claims.subject().as_str())
        .map_err(|e| Check::Refused(format!("the ID token's {e}")))?;
    // The signature over these bytes was checked just above.
    let groups = groups_in(&id_token.to_string(), &oidc.config.groups_claim);
    let Some((_, grant)) = oidc.config.grant(&groups) else {
        return Err(Check::Refused(format!(
            "{principal} is in no group this console maps to a tenant ({} holds {groups:?})",
            oidc.config.groups_claim
        )));
    };
    Ok(SignedIn {
        principal,
        email: claims.email().map(|e| e.as_str().to_owned()),
        tenant_id: grant.tenant.clone(),
        role: match grant.role {
            ConsoleRole::Ops => Role::Ops,
        },
    })
}

/// The strings of claim `claim` in the payload of the compact JWT `jwt` (a list of strings, or
/// one string); none when it is absent or of another shape.
fn groups_in(jwt: &str, claim: &str) -> Vec<String> {
    let payload = jwt
        .split('.')
        .nth(1)
        .and_then(|p| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p)
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    match payload.as_ref().and_then(|p| p.get(claim)) {
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .filter_map(|g| g.as_str().map(str::to_owned))
            .collect(),
        Some(serde_json::Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_read_as_a_list_or_one_string_and_nothing_else() {
        let jwt = |payload: &str| {
            let p = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(payload);
            format!("e30.{p}.sig")
        };
        assert_eq!(
            groups_in(&jwt(r#"{"groups":["a","b",3]}"#), "groups"),
            ["a", "b"]
        );
        assert_eq!(groups_in(&jwt(r#"{"roles":"ops"}"#), "roles"), ["ops"]);
        assert!(groups_in(&jwt(r#"{"groups":{"a":1}}"#), "groups").is_empty());
        assert!(groups_in(&jwt("{}"), "groups").is_empty());
        assert!(groups_in("not a token", "groups").is_empty());
    }
}
