//! The HTTP adapter: one POST (or PUT/PATCH) per attempt with the `Idempotency-Key` header, the
//! arguments as JSON, and headers naming tenant, action, attempt and request hash.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncebox_core::DeliveryOutcome;
use oncebox_core::config::{self, HttpConfig, HttpMethod};
use oncebox_core::outcome::{AttemptError, ErrorCode};
use oncebox_core::retry::RetryAfter;
use oncebox_signing::webhook::{self, Signer};
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::Value;

use crate::classify::{StatusClass, StatusOverrides, classify_status};

/// At most this much of a response is read and kept.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// Installs rustls' ring provider as the process default (idempotent). oncebox uses ring for
/// every TLS connection, Postgres and HTTP alike, so only one crypto backend is compiled.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The builder every HTTP client of the delivery layer starts from: redirects are never
/// followed (a 301/302 would turn a POST into a body-less GET, a 307 would re-send the arguments
/// and credentials to another host), so a 3xx is an answer to classify.
pub(crate) fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())
}

/// Builds `builder` for destination `name`.
///
/// # Errors
/// [`BuildError`] when the HTTP client cannot be built (its TLS setup).
pub(crate) fn client(
    name: &str,
    builder: reqwest::ClientBuilder,
) -> Result<reqwest::Client, BuildError> {
    builder
        .build()
        .map_err(|e| BuildError::new(name, "kind", &format!("cannot build the HTTP client: {e}")))
}

/// The pooled client an HTTP destination delivers with: hyper's, over rustls with the
/// platform's trust store (as every other client here), HTTP/2 when the server offers it over
/// TLS. It follows no redirect. Deliveries are the hot path, so the adapter drives hyper without
/// reqwest's layers (which parse each request's URL again, keep redirect state and box futures).
pub(crate) type DeliveryClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Full<bytes::Bytes>,
>;

/// Builds the [`DeliveryClient`] of destination `name`: connections time out after
/// `connect_timeout`, up to 256 are kept idle, each for at most 90 s.
///
/// # Errors
/// [`BuildError`] when the TLS setup cannot be built (no usable trust store).
pub(crate) fn delivery_client(
    name: &str,
    connect_timeout: Duration,
) -> Result<DeliveryClient, BuildError> {
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::{TokioExecutor, TokioTimer};
    let tls_error = |e: rustls::Error| {
        BuildError::new(name, "kind", &format!("cannot build the HTTP client: {e}"))
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls_platform_verifier::Verifier::new(provider.clone()).map_err(tls_error)?;
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(tcp);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(256)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector),
    )
}

/// A URL as errors show it: scheme, host, port and path — never the user, password, query or
/// fragment, where credentials such as `?api_key=` live.
pub fn shown(url: &reqwest::Url) -> String {
    let mut shown = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    if let Some(port) = url.port() {
        shown.push_str(&format!(":{port}"));
    }
    shown.push_str(url.path());
    shown
}

/// URL text as errors show it ([`shown`]); text that is not a URL is cut at its query.
pub(crate) fn shown_text(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => shown(&u),
        Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_owned(),
    }
}

/// A transport error as text, its URL (if any) cut to what [`shown`] keeps.
pub(crate) fn error_text(mut e: reqwest::Error) -> String {
    if let Some(url) = e.url_mut() {
        url.set_query(None);
        url.set_fragment(None);
        let _ = url.set_username("");
        let _ = url.set_password(None);
    }
    error_chain(&e)
}

/// ` to <Location>` of a redirect answer, shown as [`shown`] would (empty without one).
pub(crate) fn location(headers: &HeaderMap) -> String {
    headers
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(|l| format!(" to {}", excerpt_of(&shown_text(l), 256)))
        .unwrap_or_default()
}

/// At most `max` bytes of `text`, cut at a character boundary.
pub(crate) fn excerpt_of(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// One attempt's request, as the worker hands it over.
#[derive(Debug, Clone)]
pub struct DeliveryRequest<'a> {
    /// The tenant.
    pub tenant_id: &'a str,
    /// The intent's delivery key (`Idempotency-Key`, `webhook-id`): unique across tenants, the
    /// same for every attempt ([`oncebox_core::delivery_key`]).
    pub delivery_key: &'a str,
    /// The action.
    pub action: &'a str,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// The request hash.
    pub request_hash: &'a str,
    /// The arguments, sent as the JSON body.
    pub arguments: &'a Value,
}

/// A configured HTTP destination with its connection pool.
#[derive(Debug, Clone)]
pub struct HttpDestination {
    name: String,
    /// Shared (behind an `Arc`): hyper's client carries its settings inline, hundreds of bytes.
    client: Arc<DeliveryClient>,
    uri: hyper::Uri,
    method: hyper::Method,
    headers: HeaderMap,
    honours_keys: bool,
    timeout: Duration,
    reference_pointer: Option<String>,
    completion_event: Option<String>,
    overrides: StatusOverrides,
    signer: Option<Arc<Signer>>,
}

/// A destination that cannot be built from its configuration.
#[derive(Debug, thiserror::Error)]
#[error("destinations.{destination}.{field}: {reason}")]
pub struct BuildError {
    destination: String,
    field: String,
    reason: String,
}

impl BuildError {
    pub(crate) fn new(destination: &str, field: &str, reason: &str) -> BuildError {
        BuildError {
            destination: destination.to_owned(),
            field: field.to_owned(),
            reason: reason.to_owned(),
        }
    }
}

/// The request headers of destination `name`, from its configured map under `field` (values
/// already resolved), each marked sensitive so that it is never logged.
///
/// # Errors
/// [`BuildError`] naming `field.<header>` when a value is not valid in HTTP.
pub(crate) fn header_map(
    name: &str,
    field: &str,
    configured: &BTreeMap<config::HeaderName, config::HeaderValue>,
) -> Result<HeaderMap, BuildError> {
    let err = |k: &config::HeaderName, reason: String| BuildError {
        destination: name.to_owned(),
        field: format!("{field}.{k}"),
        reason,
    };
    let mut headers = HeaderMap::new();
    for (k, v) in configured {
        let header =
            HeaderName::from_bytes(k.as_str().as_bytes()).map_err(|e| err(k, e.to_string()))?;
        let mut value = HeaderValue::from_str(v.expose())
            .map_err(|_| err(k, "value is not valid in an HTTP header".into()))?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    Ok(headers)
}

/// The signer of destination `name`, when it signs (`[destinations.X.signing]`, secrets
/// already resolved).
///
/// # Errors
/// [`BuildError`] naming `signing.secrets[i]` for a secret that cannot sign.
pub(crate) fn signer(name: &str, dest: &HttpConfig) -> Result<Option<Arc<Signer>>, BuildError> {
    let Some(signing) = &dest.signing else {
        return Ok(None);
    };
    let secrets: Vec<&str> = signing.secrets.iter().map(|s| s.expose()).collect();
    Signer::new(&secrets)
        .map(|s| Some(Arc::new(s)))
        .map_err(|(i, e)| BuildError::new(name, &format!("signing.secrets[{i}]"), &e.to_string()))
}

/// The Standard Webhooks headers of a request with `body` under `key`, signed now.
pub(crate) fn signature_headers(signer: &Signer, key: &str, body: &[u8]) -> HeaderMap {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let mut headers = HeaderMap::new();
    let signature = signer.sign(key, now, body);
    // Keys and base64 signatures are printable ASCII: always valid header values.
    if let (Ok(id), Ok(mut sig)) = (
        HeaderValue::from_str(key),
        HeaderValue::from_str(&signature),
    ) {
        sig.set_sensitive(true);
        headers.insert(webhook::HEADER_ID, id);
        headers.insert(webhook::HEADER_TIMESTAMP, HeaderValue::from(now));
        headers.insert(webhook::HEADER_SIGNATURE, sig);
    }
    headers
}

/// `Idempotency-Key`.
pub(crate) const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// `X-Oncebox-Tenant`.
pub(crate) const TENANT: HeaderName = HeaderName::from_static("x-oncebox-tenant");
/// `X-Oncebox-Action`.
pub(crate) const ACTION: HeaderName = HeaderName::from_static("x-oncebox-action");
/// `X-Oncebox-Attempt`.
pub(crate) const ATTEMPT: HeaderName = HeaderName::from_static("x-oncebox-attempt");
/// `X-Oncebox-Request-Hash`.
pub(crate) const REQUEST_HASH: HeaderName = HeaderName::from_static("x-oncebox-request-hash");

/// The headers every attempt carries: key, tenant, action, attempt, request hash and the JSON
/// content type.
///
/// # Errors
/// The name of the first field whose value is not valid in an HTTP header.
pub(crate) fn request_headers(req: &DeliveryRequest<'_>) -> Result<HeaderMap, &'static str> {
    let value = |field: &'static str, v: &str| HeaderValue::from_str(v).map_err(|_| field);
    let mut headers = HeaderMap::with_capacity(8);
    headers.insert(IDEMPOTENCY_KEY, value("delivery_key", req.delivery_key)?);
    headers.insert(TENANT, value("tenant_id", req.tenant_id)?);
    headers.insert(ACTION, value("action", req.action)?);
    headers.insert(ATTEMPT, HeaderValue::from(req.attempt));
    headers.insert(REQUEST_HASH, value("request_hash", req.request_hash)?);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(headers)
}

impl HttpDestination {
    /// Builds the adapter for destination `name`. Header values must already be resolved
    /// ([`oncebox_core::config::Config::resolve_env`]).
    ///
    /// # Errors
    /// [`BuildError`] naming the field (a header value that is not valid in HTTP).
    pub fn new(name: &str, dest: &HttpConfig) -> Result<HttpDestination, BuildError> {
        install_crypto_provider();
        let timeout = dest.timeout.get();
        let headers = header_map(name, "headers", &dest.headers)?;
        let signer = signer(name, dest)?;
        let client = Arc::new(delivery_client(name, timeout.min(Duration::from_secs(5)))?);
        Ok(HttpDestination {
            name: name.to_owned(),
            client,
            uri: request_uri(dest.url.as_str())
                .map_err(|reason| BuildError::new(name, "url", &reason))?,
            method: match dest.method {
                HttpMethod::Post => hyper::Method::POST,
                HttpMethod::Put => hyper::Method::PUT,
                HttpMethod::Patch => hyper::Method::PATCH,
            },
            headers,
            honours_keys: dest.idempotency.honours_keys(),
            timeout,
            reference_pointer: dest
                .reference_pointer
                .as_ref()
                .map(|p| p.as_str().to_owned()),
            completion_event: dest.completion_event.clone(),
            overrides: StatusOverrides {
                retry: statuses(&dest.retry_statuses),
                permanent: statuses(&dest.permanent_statuses),
            },
            signer,
        })
    }

    /// The destination's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configured request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends one attempt and classifies what happened. `budget` caps the time the whole
    /// attempt may take (the worker passes what is left of its lease); the configured timeout
    /// applies when it is shorter. Never fails: every error is an outcome.
    #[tracing::instrument(
        skip_all,
        fields(destination = %self.name, tenant = %req.tenant_id, key = %req.delivery_key, attempt = req.attempt)
    )]
    pub async fn deliver(&self, req: &DeliveryRequest<'_>, budget: Duration) -> DeliveryOutcome {
        let limit = budget.min(self.timeout);
        let started = Instant::now();
        let outcome = match tokio::time::timeout(limit, self.attempt(req)).await {
            Ok(outcome) => outcome,
            Err(_) => unknown(
                ErrorCode::Timeout,
                format!("no complete answer within {limit:?}"),
                None,
            ),
        };
        tracing::debug!(
            class = outcome.class().as_str(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "delivered"
        );
        outcome
    }

    async fn attempt(&self, req: &DeliveryRequest<'_>) -> DeliveryOutcome {
        let body = match serde_json::to_vec(req.arguments) {
            Ok(b) => b,
            Err(e) => {
                return DeliveryOutcome::Permanent {
                    error: AttemptError::new(ErrorCode::PolicyRejected, format!("arguments: {e}")),
                };
            }
        };
        let mut headers = self.headers.clone();
        if let Some(signer) = &self.signer {
            headers.extend(signature_headers(signer, req.delivery_key, &body));
        }
        match request_headers(req) {
            Ok(own) => headers.extend(own),
            Err(field) => {
                return DeliveryOutcome::Permanent {
                    error: AttemptError::new(
                        ErrorCode::PolicyRejected,
                        format!("{field} is not valid in an HTTP header"),
                    ),
                };
            }
        }
        let mut request = hyper::Request::new(http_body_util::Full::new(body.into()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = headers;
        match self.client.request(request).await {
            Ok(response) => self.answer(response).await,
            Err(e) => classify_client_error(&self.method, &self.uri, &e),
        }
    }

    /// Classifies an answer: its status, then its body (read within bounds).
    async fn answer(
        &self,
        mut response: hyper::Response<hyper::body::Incoming>,
    ) -> DeliveryOutcome {
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(RetryAfter::parse);
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let said = match (300..400).contains(&status) {
            true => format!(
                "HTTP {status}, a redirect{} (not followed)",
                location(response.headers())
            ),
            false => format!("HTTP {status}"),
        };
        let class = classify_status(status, self.honours_keys, &self.overrides);
        // Read the body (bounded) for every answer: a success needs it, errors keep a snippet.
        let watch_stream = (is_stream && class == StatusClass::Success)
            .then_some(self.completion_event.as_deref())
            .flatten();
        let body = match read_body(&mut response, watch_stream).await {
            Ok(body) => body,
            Err(e) if matches!(class, StatusClass::Success | StatusClass::Unknown) => {
                return unknown(
                    ErrorCode::ConnectionReset,
                    format!("answer broke off: {}", error_chain(&e)),
                    Some(status),
                );
            }
            // A refusal whose body broke off is still that refusal.
            Err(_) => return refused(class, status, said, retry_after),
        };
        match (class, watch_stream, body.completed) {
            (StatusClass::Success, Some(_), Some(event)) => {
                self.success(status, event.data.into_bytes(), event.truncated)
            }
            (StatusClass::Success, Some(event), None) => unknown(
                ErrorCode::StreamIncomplete,
                format!("event stream ended without its {event:?} event"),
                Some(status),
            ),
            (StatusClass::Success, None, _) => self.success(status, body.bytes, body.truncated),
            (class, ..) => {
                let text = String::from_utf8_lossy(&body.bytes[..body.bytes.len().min(512)]);
                refused(class, status, format!("{said}: {text}"), retry_after)
            }
        }
    }

    fn success(&self, status: u16, body: Vec<u8>, truncated: bool) -> DeliveryOutcome {
        let parsed: Option<Value> = (!truncated)
            .then(|| serde_json::from_slice(&body).ok())
            .flatten();
        let external_reference = match (&self.reference_pointer, &parsed) {
            (None, _) => None,
            (Some(p), Some(v)) => match reference_at(v, p) {
                Some(reference) => Some(reference),
                None => {
                    return unknown(
                        ErrorCode::MalformedResponse,
                        format!("HTTP {status} without a reference at {p}"),
                        Some(status),
                    );
                }
            },
            (Some(p), None) => {
                return unknown(
                    ErrorCode::MalformedResponse,
                    format!(
                        "HTTP {status} whose answer is not JSON{} (reference expected at {p})",
                        if truncated { " or exceeds 64 KiB" } else { "" }
                    ),
                    Some(status),
                );
            }
        };
        let response = match parsed {
            Some(v) => Some(v),
            None if body.is_empty() => None,
            None => Some(serde_json::json!({
                "text": String::from_utf8_lossy(&body).into_owned(),
                "truncated": truncated,
            })),
        };
        DeliveryOutcome::Succeeded {
            status_code: Some(status),
            external_reference,
            response,
        }
    }
}

/// The request target of destination URL `url`: the URL as hyper takes it, without its fragment
/// (never sent).
///
/// # Errors
/// Why the URL cannot be a request target.
fn request_uri(url: &str) -> Result<hyper::Uri, String> {
    let mut url = reqwest::Url::parse(url).map_err(|e| e.to_string())?;
    url.set_fragment(None);
    url.as_str()
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| e.to_string())
}

/// The external reference at pointer `p` of an answer: a string, or a number as text.
pub(crate) fn reference_at(answer: &Value, p: &str) -> Option<String> {
    match answer.pointer(p) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

fn statuses(list: &Option<Vec<oncebox_core::config::HttpStatus>>) -> Option<Vec<u16>> {
    list.as_ref().map(|l| l.iter().map(|s| s.get()).collect())
}

/// What was read of an answer's body.
struct Body {
    /// At most [`MAX_RESPONSE_BYTES`] of it.
    bytes: Vec<u8>,
    /// True when there was more.
    truncated: bool,
    /// For an event stream watched for its completion event: that event, once seen.
    completed: Option<SseEvent>,
}

/// Reads an answer's body, keeping at most [`MAX_RESPONSE_BYTES`]; with `completion`, reads an
/// event stream until that event (whose data is returned) or its end.
async fn read_body(
    response: &mut hyper::Response<hyper::body::Incoming>,
    completion: Option<&str>,
) -> Result<Body, hyper::Error> {
    use http_body_util::BodyExt;
    let mut body = Body {
        bytes: Vec::new(),
        truncated: false,
        completed: None,
    };
    let mut sse = SseParser::new(MAX_RESPONSE_BYTES);
    while let Some(frame) = response.body_mut().frame().await {
        let Ok(chunk) = frame?.into_data() else {
            continue; // trailers
        };
        if let Some(target) = completion {
            if let Some(data) = sse.feed(&chunk, target) {
                body.completed = Some(data);
                break;
            }
            continue;
        }
        let room = MAX_RESPONSE_BYTES.saturating_sub(body.bytes.len());
        body.bytes
            .extend_from_slice(&chunk[..chunk.len().min(room)]);
        if chunk.len() > room {
            body.truncated = true;
            break;
        }
    }
    Ok(body)
}

/// The outcome of an answer that is not a success: `class` with an HTTP status error of
/// `status` saying `detail`.
fn refused(
    class: StatusClass,
    status: u16,
    detail: String,
    retry_after: Option<RetryAfter>,
) -> DeliveryOutcome {
    let error = AttemptError {
        code: ErrorCode::HttpStatus,
        detail,
        status_code: Some(status),
    };
    match class {
        StatusClass::RetryBeforeExecution => {
            DeliveryOutcome::RetryBeforeExecution { error, retry_after }
        }
        StatusClass::Permanent => DeliveryOutcome::Permanent { error },
        StatusClass::Unknown | StatusClass::Success => DeliveryOutcome::Unknown { error },
    }
}

pub(crate) fn unknown(
    code: ErrorCode,
    detail: String,
    status_code: Option<u16>,
) -> DeliveryOutcome {
    DeliveryOutcome::Unknown {
        error: AttemptError {
            code,
            detail,
            status_code,
        },
    }
}

/// A transport error: before the request could have left (connect, DNS, TLS) it is safe to
/// retry; after (timeout, reset, reused connection closed) the outcome is unknown.
pub(crate) fn classify_transport_error(e: reqwest::Error) -> DeliveryOutcome {
    let (connect, timeout, tls) = (e.is_connect(), e.is_timeout(), tls_failed(&e));
    classify_failure(connect, timeout, tls, error_text(e))
}

/// [`classify_transport_error`] for the [`DeliveryClient`]'s errors, which do not carry the
/// URL: the detail starts with the method and the URL `uri` as [`shown`].
fn classify_client_error(
    method: &hyper::Method,
    uri: &hyper::Uri,
    e: &hyper_util::client::legacy::Error,
) -> DeliveryOutcome {
    let chain = format!(
        "{method} {}: {}",
        shown_text(&uri.to_string()),
        error_chain(e)
    );
    classify_failure(e.is_connect(), false, tls_failed(e), chain)
}

/// Whether `e` or an error under it is rustls' (a handshake or certificate failure). An I/O
/// error is looked into (its `source` passes over the error it wraps).
fn tls_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(e);
    while let Some(error) = at {
        if error.is::<rustls::Error>() {
            return true;
        }
        at = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io.get_ref().map(|inner| inner as _),
            None => error.source(),
        };
    }
    false
}

/// The outcome of a request that got no answer: connecting failed (`connect`: safe to retry;
/// TLS when `tls`, else DNS or refused as `chain` tells), it timed out, or the connection broke
/// (unknown).
fn classify_failure(connect: bool, timeout: bool, tls: bool, chain: String) -> DeliveryOutcome {
    if connect {
        let lower = chain.to_lowercase();
        let code = if tls {
            ErrorCode::Tls
        } else if lower.contains("dns") || lower.contains("resolve") || lower.contains("lookup") {
            ErrorCode::Dns
        } else if lower.contains("tls")
            || lower.contains("certificate")
            || lower.contains("handshake")
        {
            ErrorCode::Tls
        } else {
            ErrorCode::ConnectRefused
        };
        return DeliveryOutcome::RetryBeforeExecution {
            error: AttemptError {
                code,
                detail: chain,
                status_code: None,
            },
            retry_after: None,
        };
    }
    if timeout {
        return unknown(ErrorCode::Timeout, chain, None);
    }
    unknown(ErrorCode::ConnectionReset, chain, None)
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// One event of an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// Its data lines, joined by newlines: at most the parser's limit.
    pub(crate) data: String,
    /// True when the data was longer than the limit and was cut.
    pub(crate) truncated: bool,
}

/// A minimal `text/event-stream` reader (lines `event:` and `data:`, an event ends at a blank
/// line) that finds the events named a target. Its work is linear in the bytes fed and its
/// memory bounded: a line or an event's data longer than `limit` keeps only its first `limit`
/// bytes, and is marked truncated.
pub(crate) struct SseParser {
    limit: usize,
    /// Bytes fed and not yet read, from `at`.
    pending: Vec<u8>,
    at: usize,
    /// The line being read (up to the limit and its field name) and whether it was cut.
    line: Vec<u8>,
    line_cut: bool,
    event: Option<String>,
    data: Vec<u8>,
    data_lines: usize,
    data_cut: bool,
}

impl SseParser {
    /// A parser keeping at most `limit` bytes of one event's data.
    pub(crate) fn new(limit: usize) -> SseParser {
        SseParser {
            limit,
            pending: Vec::new(),
            at: 0,
            line: Vec::new(),
            line_cut: false,
            event: None,
            data: Vec::new(),
            data_lines: 0,
            data_cut: false,
        }
    }

    /// Feeds `chunk` and returns the next event named `target` that the bytes fed so far
    /// complete; call again with an empty chunk for the next one.
    pub(crate) fn feed(&mut self, chunk: &[u8], target: &str) -> Option<SseEvent> {
        if self.at == self.pending.len() {
            self.pending.clear();
            self.at = 0;
        }
        self.pending.extend_from_slice(chunk);
        while self.at < self.pending.len() {
            let rest = &self.pending[self.at..];
            let (end, complete) = match rest.iter().position(|b| *b == b'\n') {
                Some(i) => (i, true),
                None => (rest.len(), false),
            };
            let room = (self.limit + 16).saturating_sub(self.line.len());
            self.line.extend_from_slice(&rest[..end.min(room)]);
            self.line_cut |= end > room;
            self.at += end + usize::from(complete);
            if complete && let Some(event) = self.end_line(target) {
                return Some(event);
            }
        }
        None
    }

    /// A whole line was read: take its field, or end the event at a blank line.
    fn end_line(&mut self, target: &str) -> Option<SseEvent> {
        let mut line = std::mem::take(&mut self.line);
        let cut = std::mem::take(&mut self.line_cut);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            let name = self.event.take();
            let data = std::mem::take(&mut self.data);
            let truncated = std::mem::take(&mut self.data_cut);
            self.data_lines = 0;
            return (name.as_deref().unwrap_or("message") == target).then(|| SseEvent {
                data: String::from_utf8_lossy(&data).into_owned(),
                truncated,
            });
        }
        if let Some(v) = line.strip_prefix(b"event:") {
            let v = v.strip_prefix(b" ").unwrap_or(v);
            self.event = Some(String::from_utf8_lossy(v).into_owned());
        } else if let Some(v) = line.strip_prefix(b"data:") {
            let v = v.strip_prefix(b" ").unwrap_or(v);
            if self.data_lines > 0 {
                self.push_data(b"\n");
            }
            self.push_data(v);
            self.data_lines += 1;
            self.data_cut |= cut;
        }
        None
    }

    fn push_data(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.data.len());
        self.data.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.data_cut |= bytes.len() > room;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(parser: &mut SseParser, chunks: &[&[u8]], target: &str) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for chunk in chunks {
            let mut fed: &[u8] = chunk;
            while let Some(e) = parser.feed(fed, target) {
                fed = &[];
                out.push(e);
            }
        }
        out
    }

    #[test]
    fn events_are_found_across_chunks_and_others_passed_over() {
        let mut p = SseParser::new(1024);
        let found = events(
            &mut p,
            &[
                b"event: progress\ndata: {\"step\"",
                b":1}\n\nevent: done\r\ndata: a\ndata: b\n",
                b"\nevent: done\ndata: c\n\n",
            ],
            "done",
        );
        let data: Vec<&str> = found.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, ["a\nb", "c"]);
        assert!(found.iter().all(|e| !e.truncated));
    }

    #[test]
    fn an_event_longer_than_the_limit_is_cut_and_marked() {
        let mut p = SseParser::new(8);
        let found = events(
            &mut p,
            &[b"event: done\ndata: 0123456789abcdef\n\n"],
            "done",
        );
        assert_eq!(
            found,
            [SseEvent {
                data: "01234567".into(),
                truncated: true
            }]
        );
        let found = events(
            &mut p,
            &[b"event: done\ndata: 0123\ndata: 4567\n\n"],
            "done",
        );
        assert_eq!(found[0].data, "0123\n456");
        assert!(found[0].truncated);
    }

    /// A stream that never sends a newline is read once, not rescanned chunk after chunk: 8 MiB
    /// fed in 1 KiB chunks keeps at most the limit (and a line's field name) in memory.
    #[test]
    fn a_stream_without_newlines_is_held_to_the_limit() {
        let mut p = SseParser::new(64 * 1024);
        let chunk = vec![b'x'; 1024];
        for _ in 0..8 * 1024 {
            assert_eq!(p.feed(&chunk, "done"), None);
            assert!(p.line.len() <= 64 * 1024 + 16);
            assert!(p.pending.len() <= 1024);
        }
        assert!(p.line_cut);
    }
}
