//! The MCP adapter: one `tools/call` per attempt on an upstream MCP server over streamable HTTP
//! (JSON-RPC POSTed to one endpoint; the answer is JSON or an event stream), with the
//! idempotency key in the call's `_meta` ([`META_KEY`]). The session (`initialize`, then
//! `notifications/initialized`) is opened on first use, shared by every call, and opened again
//! when the server says it has ended it (404 to a request carrying its id).
//!
//! Classified as HTTP is (docs/architecture.md, "Classify"): nothing sent — connect, DNS, TLS,
//! or the session could not be opened — is safe to retry; sent and no complete answer is
//! unknown; a JSON-RPC refusal (unknown tool, invalid arguments) or a result with `isError` is
//! a permanent failure; any other result is the effect.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use oncebox_core::DeliveryOutcome;
use oncebox_core::config::{self, McpConfig};
use oncebox_core::outcome::{AttemptError, ErrorCode};
use oncebox_core::retry::RetryAfter;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::{Value, json};

use crate::classify::{StatusClass, StatusOverrides, classify_status};
use crate::http::{
    BuildError, DeliveryRequest, MAX_RESPONSE_BYTES, SseParser, classify_transport_error, client,
    client_builder, error_text, excerpt_of, header_map, install_crypto_provider, location,
    reference_at,
};

/// `_meta` key carrying the idempotency key of a call (the same key the gateway accepts).
pub const META_KEY: &str = "oncebox.dev/idempotency_key";
/// `_meta` key carrying the tenant of a delivered intent.
pub const META_TENANT: &str = "oncebox.dev/tenant";
/// `_meta` key carrying the attempt number of a delivery, from 1.
pub const META_ATTEMPT: &str = "oncebox.dev/attempt";
/// The protocol revision oncebox asks for in `initialize`; the server's answer is used after.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// At most this much of one JSON-RPC answer is read.
const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// JSON-RPC errors that say the request was refused before anything ran: parse error, invalid
/// request, method not found, invalid params (MCP's answer to an unknown tool or bad arguments).
const REFUSED_BEFORE_RUNNING: [i64; 4] = [-32700, -32600, -32601, -32602];

/// What one JSON-RPC request to the server came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Exchange {
    /// Nothing reached the tool: the connection or the session could not be made.
    /// `permanent` when the server refused the session for good (401, 403, 404…).
    NotSent {
        /// What happened.
        error: AttemptError,
        /// True when trying again cannot help.
        permanent: bool,
    },
    /// The request was sent and no complete answer came back.
    NoAnswer(AttemptError),
    /// The server answered with an HTTP status that is not success.
    Status {
        /// The status.
        status: u16,
        /// Its Retry-After, if any.
        retry_after: Option<RetryAfter>,
        /// The start of its body.
        text: String,
    },
    /// A JSON-RPC error answer.
    Refused {
        /// The JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// The JSON-RPC result.
    Result(Value),
}

/// The session the server gave: its id (none for a stateless server) and protocol revision.
#[derive(Debug)]
struct Session {
    id: Option<HeaderValue>,
    version: HeaderValue,
}

/// A client of one MCP server over streamable HTTP, shared by every call to it.
#[derive(Debug)]
pub struct McpClient {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    ids: AtomicU64,
}

impl McpClient {
    /// A client of the server at `url` sending `headers` (resolved; checked as destination
    /// `name`'s `headers`) with every request, connecting within `connect_timeout`.
    ///
    /// # Errors
    /// [`BuildError`] naming the header whose value is not valid in HTTP.
    pub fn new(
        name: &str,
        url: &str,
        headers: &BTreeMap<config::HeaderName, config::HeaderValue>,
        connect_timeout: Duration,
    ) -> Result<McpClient, BuildError> {
        install_crypto_provider();
        let headers = header_map(name, "headers", headers)?;
        let client = client(
            name,
            client_builder()
                .pool_max_idle_per_host(256)
                .connect_timeout(connect_timeout.min(Duration::from_secs(5))),
        )?;
        Ok(McpClient {
            client,
            url: url.to_owned(),
            headers,
            session: tokio::sync::Mutex::new(None),
            ids: AtomicU64::new(1),
        })
    }

    /// Calls tool `name` with `arguments` (an object) and `meta` (the call's `_meta`).
    /// `extra` headers go with the request (such as `Idempotency-Key`).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: &Value,
        meta: Value,
        extra: &[(&'static str, &str)],
    ) -> Exchange {
        let params = json!({"name": name, "arguments": arguments, "_meta": meta});
        self.request("tools/call", params, extra).await
    }

    /// Every tool the server lists (following `nextCursor`), as the server describes them.
    ///
    /// # Errors
    /// What went wrong, as text for the log.
    pub async fn list_tools(&self) -> Result<Vec<Value>, String> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({"cursor": c}),
                None => json!({}),
            };
            let page = match self.request("tools/list", params, &[]).await {
                Exchange::Result(page) => page,
                other => return Err(format!("tools/list: {other:?}")),
            };
            if let Some(list) = page.get("tools").and_then(Value::as_array) {
                tools.extend(list.iter().cloned());
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(tools),
            }
        }
    }

    /// Sends one request in the session (opening it first if needed); a server that no longer
    /// knows the session (404 to its id) gets a new one and the request once more — a request
    /// to an unknown session was not processed.
    async fn request(
        &self,
        method: &str,
        params: Value,
        extra: &[(&'static str, &str)],
    ) -> Exchange {
        let mut reopened = false;
        loop {
            let session = match self.session().await {
                Ok(session) => session,
                Err(not_sent) => return not_sent,
            };
            let id = self.ids.fetch_add(1, Ordering::Relaxed);
            let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            let (answer, _) = self.send(Some(&session), &message, Some(id), extra).await;
            match answer {
                Exchange::Status { status: 404, .. } if session.id.is_some() && !reopened => {
                    reopened = true;
                    let mut current = self.session.lock().await;
                    if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &session)) {
                        *current = None;
                    }
                }
                answer => return answer,
            }
        }
    }

    /// The open session, or a new one.
    async fn session(&self) -> Result<Arc<Session>, Exchange> {
        let mut current = self.session.lock().await;
        if let Some(session) = current.as_ref() {
            return Ok(session.clone());
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let initialize = json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "oncebox", "version": env!("CARGO_PKG_VERSION")},
            },
        });
        let (answer, session_id) = self.send(None, &initialize, Some(id), &[]).await;
        let version = match answer {
            Exchange::Result(result) => result
                .get("protocolVersion")
                .and_then(Value::as_str)
                .and_then(|v| HeaderValue::from_str(v).ok())
                .ok_or_else(|| {
                    not_opened(ErrorCode::MalformedResponse, None, "no protocolVersion")
                })?,
            other => return Err(session_refused(other)),
        };
        let session = Arc::new(Session {
            id: session_id,
            version,
        });
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        match self.send(Some(&session), &initialized, None, &[]).await.0 {
            Exchange::Result(_) => {}
            other => return Err(session_refused(other)),
        }
        *current = Some(session.clone());
        Ok(session)
    }

    /// POSTs one JSON-RPC message and reads the answer to request `id` (none for a
    /// notification); also returns the session id the server sent.
    async fn send(
        &self,
        session: Option<&Session>,
        message: &Value,
        id: Option<u64>,
        extra: &[(&'static str, &str)],
    ) -> (Exchange, Option<HeaderValue>) {
        let own = match own_headers(session, extra) {
            Ok(own) => own,
            Err(error) => {
                let permanent = true;
                return (Exchange::NotSent { error, permanent }, None);
            }
        };
        let request = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
            .headers(own);
        let body = serde_json::to_vec(message).unwrap_or_default();
        let mut response = match request.body(body).send().await {
            Ok(response) => response,
            Err(e) => return (transport(e), None),
        };
        let session_id = response.headers().get("mcp-session-id").cloned();
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(RetryAfter::parse);
            let redirect = if (300..400).contains(&status) {
                format!(
                    "a redirect{} (not followed): ",
                    location(response.headers())
                )
            } else {
                String::new()
            };
            let head = response.chunk().await.ok().flatten().unwrap_or_default();
            let text = redirect + &String::from_utf8_lossy(&head[..head.len().min(512)]);
            let status = Exchange::Status {
                status,
                retry_after,
                text,
            };
            return (status, session_id);
        }
        let Some(id) = id else {
            return (Exchange::Result(Value::Null), session_id);
        };
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let answer = if is_stream {
            read_stream(&mut response, id).await
        } else {
            read_json(&mut response).await
        };
        (answer, session_id)
    }
}

/// The JSON-RPC answer in a JSON body.
async fn read_json(response: &mut reqwest::Response) -> Exchange {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > MAX_MESSAGE_BYTES => {
                return no_answer(ErrorCode::MalformedResponse, "the answer exceeds 1 MiB");
            }
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => break,
            Err(e) => {
                return no_answer(
                    ErrorCode::ConnectionReset,
                    &format!("answer broke off: {}", error_text(e)),
                );
            }
        }
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(message) => rpc_answer(&message),
        Err(e) => no_answer(
            ErrorCode::MalformedResponse,
            &format!("the answer is not JSON: {e}"),
        ),
    }
}

/// The answer to request `id` in an event stream (other messages — progress, logs, the
/// server's own requests — are passed over).
async fn read_stream(response: &mut reqwest::Response, id: u64) -> Exchange {
    let mut sse = SseParser::new(MAX_MESSAGE_BYTES);
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                return no_answer(
                    ErrorCode::StreamIncomplete,
                    "the event stream ended without the call's answer",
                );
            }
            Err(e) => {
                return no_answer(
                    ErrorCode::ConnectionReset,
                    &format!("answer broke off: {}", error_text(e)),
                );
            }
        };
        let mut fed: &[u8] = &chunk;
        while let Some(event) = sse.feed(fed, "message") {
            fed = &[];
            if event.truncated {
                return no_answer(
                    ErrorCode::MalformedResponse,
                    "a message of the event stream exceeds 1 MiB",
                );
            }
            let Ok(message) = serde_json::from_str::<Value>(&event.data) else {
                continue;
            };
            let answers = message.get("id").and_then(Value::as_u64) == Some(id)
                && (message.get("result").is_some() || message.get("error").is_some());
            if answers {
                return rpc_answer(&message);
            }
        }
    }
}

/// A JSON-RPC response: its error or its result.
fn rpc_answer(message: &Value) -> Exchange {
    if let Some(error) = message.get("error") {
        return Exchange::Refused {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        };
    }
    match message.get("result") {
        Some(result) => Exchange::Result(result.clone()),
        None => no_answer(
            ErrorCode::MalformedResponse,
            "a JSON-RPC answer without result or error",
        ),
    }
}

fn no_answer(code: ErrorCode, detail: &str) -> Exchange {
    Exchange::NoAnswer(AttemptError::new(code, detail.to_owned()))
}

fn not_opened(code: ErrorCode, status_code: Option<u16>, detail: &str) -> Exchange {
    Exchange::NotSent {
        error: AttemptError {
            code,
            detail: format!("opening the MCP session: {detail}"),
            status_code,
        },
        permanent: false,
    }
}

/// A session that could not be opened: no tool ran. Refused for good on a status the HTTP
/// classification calls permanent (401, 403, 404…) or a JSON-RPC refusal.
fn session_refused(answer: Exchange) -> Exchange {
    match answer {
        Exchange::NotSent { .. } => answer,
        Exchange::NoAnswer(error) => not_opened(error.code, error.status_code, &error.detail),
        Exchange::Status { status, text, .. } => Exchange::NotSent {
            permanent: classify_status(status, false, &StatusOverrides::default())
                == StatusClass::Permanent,
            error: AttemptError {
                code: ErrorCode::HttpStatus,
                detail: format!("opening the MCP session: HTTP {status}: {text}"),
                status_code: Some(status),
            },
        },
        Exchange::Refused { code, message } => Exchange::NotSent {
            error: AttemptError::new(
                ErrorCode::ToolError,
                format!("the server refused the MCP session: {code} {message}"),
            ),
            permanent: true,
        },
        Exchange::Result(_) => not_opened(ErrorCode::MalformedResponse, None, "unexpected answer"),
    }
}

/// A transport error as an exchange: before the request left, or after.
/// The protocol's headers of one request: the accepted answers, the JSON body, the session's
/// id and version, and `extra` (such as `Idempotency-Key`). They replace configured headers of
/// the same name, never join them.
///
/// # Errors
/// A policy refusal naming the `extra` header that cannot be sent.
fn own_headers(
    session: Option<&Session>,
    extra: &[(&'static str, &str)],
) -> Result<HeaderMap, AttemptError> {
    let mut own = HeaderMap::with_capacity(4 + extra.len());
    own.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    own.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(session) = session {
        if let Some(id) = &session.id {
            own.insert(HeaderName::from_static("mcp-session-id"), id.clone());
        }
        own.insert(
            HeaderName::from_static("mcp-protocol-version"),
            session.version.clone(),
        );
    }
    for (name, value) in extra {
        let (Ok(header), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            let detail = format!("{name} is not valid in an HTTP header");
            return Err(AttemptError::new(ErrorCode::PolicyRejected, detail));
        };
        own.insert(header, value);
    }
    Ok(own)
}

fn transport(e: reqwest::Error) -> Exchange {
    match classify_transport_error(e) {
        DeliveryOutcome::RetryBeforeExecution { error, .. } => Exchange::NotSent {
            error,
            permanent: false,
        },
        DeliveryOutcome::Unknown { error } | DeliveryOutcome::Permanent { error } => {
            Exchange::NoAnswer(error)
        }
        DeliveryOutcome::Succeeded { .. } => {
            no_answer(ErrorCode::ConnectionReset, "the request failed")
        }
    }
}

/// A configured MCP destination: its client and how to classify what the tool answered.
#[derive(Debug)]
pub struct McpDestination {
    name: String,
    client: McpClient,
    tool: Option<String>,
    honours_keys: bool,
    timeout: Duration,
    reference_pointer: Option<String>,
}

impl McpDestination {
    /// Builds the adapter for MCP destination `name` (header values resolved).
    ///
    /// # Errors
    /// [`BuildError`] naming the header whose value is not valid in HTTP.
    pub fn new(name: &str, dest: &McpConfig) -> Result<McpDestination, BuildError> {
        let timeout = dest.timeout.get();
        Ok(McpDestination {
            name: name.to_owned(),
            client: McpClient::new(name, dest.url.as_str(), &dest.headers, timeout)?,
            tool: dest.tool.clone(),
            honours_keys: dest.idempotency.honours_keys(),
            timeout,
            reference_pointer: dest
                .reference_pointer
                .as_ref()
                .map(|p| p.as_str().to_owned()),
        })
    }

    /// The destination's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The configured call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Calls the tool once and classifies what happened, within `budget` (or the configured
    /// timeout, when shorter). Never fails: every error is an outcome.
    #[tracing::instrument(
        skip_all,
        fields(destination = %self.name, tenant = %req.tenant_id, key = %req.delivery_key, attempt = req.attempt)
    )]
    pub async fn deliver(&self, req: &DeliveryRequest<'_>, budget: Duration) -> DeliveryOutcome {
        if !req.arguments.is_object() {
            return DeliveryOutcome::Permanent {
                error: AttemptError::new(
                    ErrorCode::PolicyRejected,
                    "arguments: an MCP tool takes a JSON object",
                ),
            };
        }
        let limit = budget.min(self.timeout);
        let started = Instant::now();
        // Opening the session runs no tool: if it cannot finish in time, nothing was sent.
        if let Err(not_sent) = match tokio::time::timeout(limit, self.client.session()).await {
            Ok(opened) => opened.map(drop),
            Err(_) => Err(not_opened(ErrorCode::Timeout, None, "no answer in time")),
        } {
            return self.classify(not_sent);
        }
        let tool = self.tool.as_deref().unwrap_or(req.action);
        let meta = json!({
            META_KEY: req.delivery_key,
            META_TENANT: req.tenant_id,
            META_ATTEMPT: req.attempt,
        });
        let key_header = [("idempotency-key", req.delivery_key)];
        let call = self
            .client
            .call_tool(tool, req.arguments, meta, &key_header);
        let left = limit.saturating_sub(started.elapsed());
        let answer = match tokio::time::timeout(left, call).await {
            Ok(answer) => answer,
            Err(_) => no_answer(
                ErrorCode::Timeout,
                &format!("no complete answer within {limit:?}"),
            ),
        };
        let outcome = self.classify(answer);
        tracing::debug!(
            class = outcome.class().as_str(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "called"
        );
        outcome
    }

    /// What an exchange means for the intent.
    fn classify(&self, answer: Exchange) -> DeliveryOutcome {
        match answer {
            Exchange::NotSent {
                error,
                permanent: true,
            } => DeliveryOutcome::Permanent { error },
            Exchange::NotSent { error, .. } => DeliveryOutcome::RetryBeforeExecution {
                error,
                retry_after: None,
            },
            Exchange::NoAnswer(error) => DeliveryOutcome::Unknown { error },
            Exchange::Status {
                status,
                retry_after,
                text,
            } => {
                let error = AttemptError {
                    code: ErrorCode::HttpStatus,
                    detail: format!("HTTP {status}: {text}"),
                    status_code: Some(status),
                };
                match classify_status(status, self.honours_keys, &StatusOverrides::default()) {
                    StatusClass::RetryBeforeExecution => {
                        DeliveryOutcome::RetryBeforeExecution { error, retry_after }
                    }
                    StatusClass::Permanent => DeliveryOutcome::Permanent { error },
                    StatusClass::Unknown | StatusClass::Success => {
                        DeliveryOutcome::Unknown { error }
                    }
                }
            }
            Exchange::Refused { code, message } => {
                let error = AttemptError::new(
                    ErrorCode::ToolError,
                    format!("JSON-RPC error {code}: {}", excerpt(&message)),
                );
                if REFUSED_BEFORE_RUNNING.contains(&code) {
                    DeliveryOutcome::Permanent { error }
                } else {
                    DeliveryOutcome::Unknown { error }
                }
            }
            Exchange::Result(result) => self.result(result),
        }
    }

    /// A tool result: `isError` fails for good; otherwise the effect, with its reference.
    fn result(&self, result: Value) -> DeliveryOutcome {
        if result.get("isError").and_then(Value::as_bool) == Some(true) {
            return DeliveryOutcome::Permanent {
                error: AttemptError::new(
                    ErrorCode::ToolError,
                    format!(
                        "the tool reported an error: {}",
                        excerpt(&content_text(&result))
                    ),
                ),
            };
        }
        let structured = result.get("structuredContent").cloned();
        let external_reference = match (&self.reference_pointer, &structured) {
            (Some(p), Some(v)) => reference_at(v, p),
            _ => None,
        };
        if let (Some(p), None) = (&self.reference_pointer, &external_reference) {
            return DeliveryOutcome::Unknown {
                error: AttemptError::new(
                    ErrorCode::MalformedResponse,
                    format!("a tool result without a reference at structuredContent{p}"),
                ),
            };
        }
        let response = structured.unwrap_or_else(
            || json!({"content": result.get("content").cloned().unwrap_or(Value::Null)}),
        );
        let response = if response.to_string().len() > MAX_RESPONSE_BYTES {
            json!({"text": excerpt(&response.to_string()), "truncated": true})
        } else {
            response
        };
        DeliveryOutcome::Succeeded {
            status_code: None,
            external_reference,
            response: Some(response),
        }
    }
}

/// The text blocks of a tool result's content, joined.
fn content_text(result: &Value) -> String {
    let blocks = result.get("content").and_then(Value::as_array);
    blocks
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// At most 512 bytes of `text`, cut at a character boundary.
fn excerpt(text: &str) -> String {
    excerpt_of(text, 512)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_headers_take_any_case_and_refuse_what_cannot_be_sent_naming_it() {
        let own = own_headers(None, &[("Idempotency-Key", "k-1")]).expect("valid");
        assert_eq!(
            own.get("idempotency-key").map(|v| v.as_bytes()),
            Some(&b"k-1"[..])
        );
        assert_eq!(own.get_all(CONTENT_TYPE).iter().count(), 1);
        for (name, value) in [
            ("idempotency-key", "k\r\nx: 1"),
            ("idempotency-key", "k\0"),
            ("bad name", "v"),
        ] {
            let error = own_headers(None, &[(name, value)]).expect_err(value);
            assert_eq!(error.code, ErrorCode::PolicyRejected);
            assert!(error.detail.starts_with(name), "{error:?}");
        }
    }
}
