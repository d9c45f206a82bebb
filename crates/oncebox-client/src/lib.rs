//! A typed client for oncebox's HTTP API (docs/architecture.md, "Interfaces"), and the in-transaction submit for
//! orchestrators that share oncebox's database.
//!
//! - [`Client`] talks to `oncebox serve`: [`Client::submit`] retries transport failures, 5xx and
//!   429 answers with the **same** `Idempotency-Key` and the same body, so a lost answer never
//!   becomes a second intent; [`Client::get`], [`Client::wait`] (long-poll until the intent is
//!   settled) and [`Client::cancel`].
//! - [`transactional`] re-exports what an orchestrator that shares the database needs to write
//!   its intent in the same transaction as its own data.
//!
//! Every refusal by the API is an [`ApiProblem`] (RFC 9457) with its status and the field at
//! fault; nothing is retried that the server refused for a reason a retry cannot change.

use std::time::{Duration, SystemTime};

use backon::{BackoffBuilder, ExponentialBuilder};
use chrono::{DateTime, Utc};
use oncebox_core::CLIENT_DEFAULTS;
use oncebox_core::retry::RetryAfter;
use reqwest::{Method, StatusCode, Url};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use oncebox_core::Status;

/// What an orchestrator sharing oncebox's database needs to submit inside its own transaction:
/// build an [`Intake`](transactional::Intake) once, then call
/// [`Intake::submit`](transactional::Intake::submit) with the caller's open transaction.
pub mod transactional {
    pub use oncebox_core::NewIntent;
    pub use oncebox_core::config::Config;
    pub use oncebox_core::redact::RedactionKeys;
    pub use oncebox_store::{Intake, MissingRedactionKey, SubmitError, Submitted};
}

/// The README's Rust example, compiled as doctests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The HTTP guide's Rust examples (`docs/http.md`), compiled as doctests likewise.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/http.md")]
pub struct HttpGuideDoctests;

/// The Rust guide's examples (`docs/rust.md`), compiled as doctests likewise.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/rust.md")]
pub struct RustGuideDoctests;

/// Longest single long-poll the server allows, in seconds.
const MAX_WAIT_SECS: u64 = CLIENT_DEFAULTS.max_wait_secs;

/// How transport failures, 5xx and 429 answers are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryConfig {
    /// Tries in all, the first included; at least 1.
    pub max_attempts: usize,
    /// The first backoff; doubled for each further one, with jitter.
    pub min_delay: Duration,
    /// The largest backoff, and the most a server's `Retry-After` is waited for.
    pub max_delay: Duration,
}

impl Default for RetryConfig {
    fn default() -> RetryConfig {
        RetryConfig {
            max_attempts: CLIENT_DEFAULTS.attempts as usize,
            min_delay: CLIENT_DEFAULTS.min_delay,
            max_delay: CLIENT_DEFAULTS.max_delay,
        }
    }
}

/// Why a call did not return what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The API answered with a problem (4xx, or 5xx once retries were spent).
    #[error("{0}")]
    Api(ApiProblem),
    /// The request never got an answer, after every retry.
    #[error("no answer from {url} after {attempts} attempt(s): {source}")]
    Transport {
        /// The URL called.
        url: String,
        /// Tries made.
        attempts: usize,
        /// The last transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The answer was neither the documented body nor a problem document.
    #[error("unexpected answer {status} from {url}: {body}")]
    Unexpected {
        /// The URL called.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The body, cut to 512 bytes.
        body: String,
    },
    /// The client was given something it cannot use.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// What was invalid (`base_url`, `idempotency_key`, `token`).
        field: &'static str,
        /// Why.
        message: String,
    },
}

impl ClientError {
    /// The problem document, when the API refused the request.
    pub fn problem(&self) -> Option<&ApiProblem> {
        match self {
            ClientError::Api(p) => Some(p),
            _ => None,
        }
    }
}

/// An RFC 9457 problem document as oncebox sends it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ApiProblem {
    /// The HTTP status.
    pub status: u16,
    /// The status's reason phrase.
    pub title: String,
    /// What went wrong, for a person.
    pub detail: String,
    /// The field at fault (`Idempotency-Key`, `action`, `arguments/…`, `key`, …).
    #[serde(default)]
    pub field: Option<String>,
}

impl std::fmt::Display for ApiProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status, self.title, self.detail)?;
        if let Some(field) = &self.field {
            write!(f, " (field {field})")?;
        }
        Ok(())
    }
}

/// The body of a submit: what the agent wants done.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Submit {
    /// A configured action.
    pub action: String,
    /// The action's arguments (any JSON object; numbers beyond ±2^53 are refused).
    pub arguments: Value,
    /// The caller's business reference (an order id, say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub business_ref: Option<String>,
    /// The agent run that decided this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The step of that run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// After this time the intent expires instead of being delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DateTime<Utc>>,
    /// Intents of this tenant to the same destination with the same ordering key are delivered
    /// one at a time, in submit order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordering_key: Option<String>,
}

impl Submit {
    /// `action` with `arguments`, nothing else.
    pub fn new(action: impl Into<String>, arguments: Value) -> Submit {
        Submit {
            action: action.into(),
            arguments,
            business_ref: None,
            run_id: None,
            step: None,
            deadline: None,
            ordering_key: None,
        }
    }

    /// Sets the business reference.
    #[must_use]
    pub fn business_ref(mut self, value: impl Into<String>) -> Submit {
        self.business_ref = Some(value.into());
        self
    }

    /// Sets the run id and step.
    #[must_use]
    pub fn run_step(mut self, run_id: impl Into<String>, step: impl Into<String>) -> Submit {
        self.run_id = Some(run_id.into());
        self.step = Some(step.into());
        self
    }

    /// Sets the deadline.
    #[must_use]
    pub fn deadline(mut self, at: DateTime<Utc>) -> Submit {
        self.deadline = Some(at);
        self
    }

    /// Sets the ordering key.
    #[must_use]
    pub fn ordering_key(mut self, key: impl Into<String>) -> Submit {
        self.ordering_key = Some(key.into());
        self
    }
}

/// An intent as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intent {
    /// The stable key.
    pub idempotency_key: String,
    /// The action.
    pub action: String,
    /// Where it stands.
    pub status: Status,
    /// The RFC 8785 hash of the request.
    pub request_hash: String,
    /// Delivery attempts so far.
    pub attempt_count: i64,
    /// The receiver's reference for the effect, once known.
    pub external_reference: Option<String>,
    /// The receiver's answer, once succeeded.
    pub response: Option<Value>,
    /// The last error, when there was one.
    pub error: Option<Value>,
    /// The caller's business reference.
    pub business_ref: Option<String>,
    /// The agent run.
    pub run_id: Option<String>,
    /// The step of that run.
    pub step: Option<String>,
    /// The deadline, if one was set.
    pub deadline: Option<DateTime<Utc>>,
    /// The ordering key, if one was given.
    #[serde(default)]
    pub ordering_key: Option<String>,
    /// When it was first submitted.
    pub created_at: DateTime<Utc>,
    /// When it last changed.
    pub updated_at: DateTime<Utc>,
    /// When it became terminal.
    pub completed_at: Option<DateTime<Utc>>,
    /// Who submitted it (a principal: `user:NAME`, `oidc:ISSUER#SUBJECT`, `token:ID` or
    /// `db:ROLE`), where recorded.
    #[serde(default)]
    pub submitted_by: Option<String>,
}

impl Intent {
    /// Terminal, or waiting for a person: nothing more happens by itself.
    pub fn is_settled(&self) -> bool {
        self.status.is_settled()
    }

    /// Waiting for a person — `awaiting_approval` (people must approve it before anything is
    /// sent) or `needs_review` — rather than slow: [`Client::wait`] returns on it at once.
    pub fn waits_for_a_person(&self) -> bool {
        self.status.waits_for_a_person()
    }
}

/// What [`Client::submit`] returns.
#[derive(Debug, Clone, PartialEq)]
pub struct Submitted {
    /// The intent under the key.
    pub intent: Intent,
    /// True when the answer that came back was 202 (this request created it). After a lost
    /// answer and a retry it is false even if the first try created it: the key, not this flag,
    /// is what makes the submit safe.
    pub created: bool,
}

/// A client of one oncebox API with one bearer token. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    base: Url,
    token: String,
    http: reqwest::Client,
    retry: RetryConfig,
    timeout: Duration,
}

impl Client {
    /// A client of the API at `base_url` (`http://host:port`, optionally with a path prefix),
    /// authenticating with `token`.
    ///
    /// # Errors
    /// [`ClientError::Invalid`] naming `base_url` or `token`.
    pub fn new(base_url: &str, token: &str) -> Result<Client, ClientError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut base = Url::parse(base_url).map_err(|e| ClientError::Invalid {
            field: "base_url",
            message: format!("{base_url:?}: {e}"),
        })?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(ClientError::Invalid {
                field: "base_url",
                message: format!("{base_url:?} is not an http(s) URL"),
            });
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let token = token.trim();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ClientError::Invalid {
                field: "token",
                message: "a token is non-empty printable ASCII".into(),
            });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ClientError::Invalid {
                field: "base_url",
                message: format!("cannot build an HTTP client: {e}"),
            })?;
        Ok(Client {
            base,
            token: token.to_owned(),
            http,
            retry: RetryConfig::default(),
            timeout: CLIENT_DEFAULTS.timeout,
        })
    }

    /// Replaces the retry policy.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryConfig) -> Client {
        self.retry = RetryConfig {
            max_attempts: retry.max_attempts.max(1),
            ..retry
        };
        self
    }

    /// Replaces the per-request timeout (default 30 s; long-polls add their wait to it).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// Submits `request` under `key`. Transport failures, 5xx and 429 are retried with the same
    /// key and the same bytes, so the intent exists at most once whatever is lost on the way.
    ///
    /// # Errors
    /// [`ClientError::Api`] for a refusal (400 bad input, 401, 413, 415, 422 unknown action or
    /// the key already used with another request), [`ClientError::Transport`] when no answer came
    /// after every retry — the intent may or may not exist; submit again with the same key.
    pub async fn submit(&self, key: &str, request: &Submit) -> Result<Submitted, ClientError> {
        check_key(key)?;
        let body = serde_json::to_vec(request).map_err(|e| ClientError::Invalid {
            field: "arguments",
            message: e.to_string(),
        })?;
        let url = self.url(&["v1", "intents"])?;
        let (status, intent) = self
            .call(Method::POST, url, Some((Some(key), body)), self.timeout)
            .await?;
        Ok(Submitted {
            intent,
            created: status == StatusCode::ACCEPTED,
        })
    }

    /// The intent under `key` as it is now.
    ///
    /// # Errors
    /// [`ClientError::Api`] with status 404 when this tenant has no such key.
    pub async fn get(&self, key: &str) -> Result<Intent, ClientError> {
        check_key(key)?;
        let url = self.url(&["v1", "intents", key])?;
        Ok(self.call(Method::GET, url, None, self.timeout).await?.1)
    }

    /// Waits until the intent under `key` is settled (terminal, `rejected` included, or waiting
    /// for a person: `awaiting_approval`, `needs_review`) or `timeout` has passed, long-polling
    /// the server (which wakes on LISTEN/NOTIFY); returns the intent as last seen. Check
    /// [`Intent::is_settled`] to tell the two apart, and [`Intent::waits_for_a_person`] to tell
    /// "people must act" from an outcome.
    ///
    /// # Errors
    /// As [`Client::get`].
    pub async fn wait(&self, key: &str, timeout: Duration) -> Result<Intent, ClientError> {
        check_key(key)?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let secs = left.as_secs().min(MAX_WAIT_SECS);
            let mut url = self.url(&["v1", "intents", key])?;
            url.query_pairs_mut().append_pair("wait", &secs.to_string());
            let intent = self
                .call(
                    Method::GET,
                    url,
                    None,
                    self.timeout + Duration::from_secs(secs),
                )
                .await?
                .1;
            if intent.is_settled() || secs == 0 || tokio::time::Instant::now() >= deadline {
                return Ok(intent);
            }
        }
    }

    /// Cancels the intent under `key` before it is dispatched. A retried cancel whose first
    /// answer was lost finds the intent already cancelled and returns it.
    ///
    /// # Errors
    /// [`ClientError::Api`] with status 409 and the reason when it may already be dispatched,
    /// 404 when there is no such key.
    pub async fn cancel(&self, key: &str) -> Result<Intent, ClientError> {
        check_key(key)?;
        let url = self.url(&["v1", "intents", key, "cancel"])?;
        match self.call(Method::POST, url, None, self.timeout).await {
            Ok((_, intent)) => Ok(intent),
            Err(ClientError::Api(p)) if p.status == 409 => match self.get(key).await {
                Ok(intent) if intent.status == Status::Cancelled => Ok(intent),
                _ => Err(ClientError::Api(p)),
            },
            Err(e) => Err(e),
        }
    }

    /// Approves the intent under `key`, awaiting approval, as this client's token's principal
    /// (an ops token of the intent's tenant), with `reason` for the audit log: the intent as it
    /// now is — still `awaiting_approval`, or `pending` once this was the last approval it
    /// needed. Sent once, never retried: a decision is not repeated behind a person's back (a
    /// second try of one that landed would be refused as already approved).
    ///
    /// # Errors
    /// [`ClientError::Api`]: 409 with the reason when refused (the submitter approving, a
    /// second approval by the same principal, the window closed), 403 for an agent token, 404
    /// when there is no such key.
    pub async fn approve(&self, key: &str, reason: Option<&str>) -> Result<Intent, ClientError> {
        self.decide(key, "approve", reason).await
    }

    /// Rejects the intent under `key`, awaiting approval, for `reason`: it ends `rejected`,
    /// never sent. Sent once, as [`Client::approve`].
    ///
    /// # Errors
    /// As [`Client::approve`]; 400 naming `reason` when it is empty.
    pub async fn reject(&self, key: &str, reason: &str) -> Result<Intent, ClientError> {
        self.decide(key, "reject", Some(reason)).await
    }

    async fn decide(
        &self,
        key: &str,
        decision: &str,
        reason: Option<&str>,
    ) -> Result<Intent, ClientError> {
        check_key(key)?;
        let url = self.url(&["v1", "ops", "intents", key, decision])?;
        let body = serde_json::to_vec(&serde_json::json!({ "reason": reason })).map_err(|e| {
            ClientError::Invalid {
                field: "reason",
                message: e.to_string(),
            }
        })?;
        let once = Client {
            retry: RetryConfig {
                max_attempts: 1,
                ..self.retry
            },
            ..self.clone()
        };
        let (_, intent) = once
            .call(Method::POST, url, Some((None, body)), self.timeout)
            .await?;
        Ok(intent)
    }

    fn url(&self, segments: &[&str]) -> Result<Url, ClientError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ClientError::Invalid {
                field: "base_url",
                message: "cannot hold a path".into(),
            })?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// One logical call: tries until an answer that retrying cannot change, or retries are spent.
    async fn call(
        &self,
        method: Method,
        url: Url,
        submit: Option<(Option<&str>, Vec<u8>)>,
        timeout: Duration,
    ) -> Result<(StatusCode, Intent), ClientError> {
        let mut delays = ExponentialBuilder::default()
            .with_min_delay(self.retry.min_delay)
            .with_max_delay(self.retry.max_delay)
            .with_max_times(self.retry.max_attempts.saturating_sub(1))
            .with_jitter()
            .build();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .timeout(timeout)
                .bearer_auth(&self.token);
            if let Some((key, body)) = &submit {
                if let Some(key) = key {
                    req = req.header("idempotency-key", sf_string(key));
                }
                req = req
                    .header("content-type", "application/json")
                    .body(body.clone());
            }
            let failure = match self.answer(&url, req.send().await).await {
                Ok(done) => return Ok(done),
                Err(Retry::No(e)) => return Err(e),
                Err(Retry::Yes(e, after)) => (e, after),
            };
            let Some(delay) = delays.next() else {
                return Err(match failure.0 {
                    Failure::Transport(source) => ClientError::Transport {
                        url: url.to_string(),
                        attempts,
                        source,
                    },
                    Failure::Error(e) => e,
                });
            };
            let delay = failure
                .1
                .and_then(|after| {
                    after
                        .earliest(SystemTime::now())
                        .duration_since(SystemTime::now())
                        .ok()
                })
                .map_or(delay, |wanted| {
                    wanted.clamp(delay, self.retry.max_delay.max(delay))
                });
            tracing::debug!(%url, attempts, ?delay, "retrying with the same key");
            tokio::time::sleep(delay).await;
        }
    }

    async fn answer(
        &self,
        url: &Url,
        sent: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<(StatusCode, Intent), Retry> {
        let response = sent.map_err(|e| Retry::Yes(Failure::Transport(e), None))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(RetryAfter::parse);
        let bytes = response
            .bytes()
            .await
            .map_err(|e| Retry::Yes(Failure::Transport(e), None))?;
        if status.is_success() {
            return serde_json::from_slice::<Intent>(&bytes)
                .map(|intent| (status, intent))
                .map_err(|_| Retry::No(unexpected(url, status, &bytes)));
        }
        let error = match serde_json::from_slice::<ApiProblem>(&bytes) {
            Ok(p) => ClientError::Api(p),
            Err(_) => unexpected(url, status, &bytes),
        };
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            Err(Retry::Yes(Failure::Error(error), retry_after))
        } else {
            Err(Retry::No(error))
        }
    }
}

enum Failure {
    Transport(reqwest::Error),
    Error(ClientError),
}

enum Retry {
    Yes(Failure, Option<RetryAfter>),
    No(ClientError),
}

fn unexpected(url: &Url, status: StatusCode, bytes: &[u8]) -> ClientError {
    let body = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).into_owned();
    ClientError::Unexpected {
        url: url.to_string(),
        status: status.as_u16(),
        body,
    }
}

fn check_key(key: &str) -> Result<(), ClientError> {
    oncebox_core::validate_key(key).map_err(|e| ClientError::Invalid {
        field: "idempotency_key",
        message: e.to_string(),
    })
}

/// The key as an RFC 8941 sf-string, so that no key is mistaken for another form.
fn sf_string(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 2);
    out.push('"');
    for c in key.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_travel_as_sf_strings() {
        assert_eq!(sf_string("abc"), "\"abc\"");
        assert_eq!(sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }

    #[test]
    fn bad_input_names_the_field() {
        let e = Client::new("not a url", "t").expect_err("bad url");
        assert!(
            matches!(
                e,
                ClientError::Invalid {
                    field: "base_url",
                    ..
                }
            ),
            "{e}"
        );
        let e = Client::new("ftp://x", "t").expect_err("bad scheme");
        assert!(
            matches!(
                e,
                ClientError::Invalid {
                    field: "base_url",
                    ..
                }
            ),
            "{e}"
        );
        let e = Client::new("http://x", " ").expect_err("empty token");
        assert!(
            matches!(e, ClientError::Invalid { field: "token", .. }),
            "{e}"
        );
        assert!(matches!(
            check_key("a b"),
            Err(ClientError::Invalid {
                field: "idempotency_key",
                ..
            })
        ));
    }

    #[test]
    fn paths_keep_a_prefix_and_encode_keys() {
        let c = Client::new("http://h:1/prefix", "t").expect("client");
        let u = c.url(&["v1", "intents", "a/b?c"]).expect("url");
        assert_eq!(u.as_str(), "http://h:1/prefix/v1/intents/a%2Fb%3Fc");
        let c = Client::new("http://h:1", "t").expect("client");
        assert_eq!(
            c.url(&["v1", "intents"]).expect("url").as_str(),
            "http://h:1/v1/intents"
        );
    }

    #[test]
    fn submit_body_leaves_out_what_is_unset() {
        let s = Submit::new("create_invoice", serde_json::json!({"a": 1})).business_ref("o-1");
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(
            v,
            serde_json::json!({"action": "create_invoice", "arguments": {"a": 1}, "business_ref": "o-1"})
        );
    }
}
