//! Reconciliation lookups: find the effects of an intent at its destination by key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use oncebox_core::config::{self, HttpConfig, LookupSettings};
use oncebox_signing::webhook::Signer;
use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use serde_json::Value;

use crate::BuildError;
use crate::http::{MAX_RESPONSE_BYTES, header_map, install_crypto_provider, shown};

/// A destination's lookup endpoint.
#[derive(Debug, Clone)]
pub struct HttpLookup {
    client: reqwest::Client,
    settings: LookupSettings,
    headers: HeaderMap,
    signer: Option<Arc<Signer>>,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum LookupResult {
    /// The objects the destination holds for the key (possibly none).
    Found(Vec<Value>),
    /// The lookup did not answer usefully; `transient` failures are worth repeating.
    Failed {
        /// True for timeouts, refused connections and 5xx; false for other 4xx and answers
        /// that are not what the lookup promised.
        transient: bool,
        /// What happened.
        detail: String,
    },
}

/// Largest lookup answer read; a longer one is refused without being read further.
pub const MAX_LOOKUP_BYTES: usize = 16 * MAX_RESPONSE_BYTES;

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// True for a path segment that a URL parser removes or climbs out of: `.`, `..`, and their
/// percent-encoded spellings (WHATWG URL, "single-dot" and "double-dot" segments).
fn is_dot_segment(segment: &str) -> bool {
    matches!(
        segment.to_ascii_lowercase().as_str(),
        "." | ".." | "%2e" | ".%2e" | "%2e." | "%2e%2e"
    )
}

/// A URL template as errors show it: without user, password, query or fragment, its
/// placeholders as written.
fn shown_template(template: &str) -> String {
    let (scheme, rest) = template.split_once("://").unwrap_or(("", template));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let rest = match rest[..authority_end].rfind('@') {
        Some(at) => &rest[at + 1..],
        None => rest,
    };
    format!("{scheme}://{rest}")
}

/// The path of URL text `url` as written (after the authority, before `?` or `#`).
fn written_path(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let from_path = after_scheme
        .find(['/', '?', '#'])
        .map_or("", |i| &after_scheme[i..]);
    from_path.split(['?', '#']).next().unwrap_or_default()
}

impl HttpLookup {
    /// The lookup of HTTP destination `name`, if it has one. It sends the lookup's own
    /// `headers` when configured, else the destination's (so a lookup carries the same
    /// credentials as a delivery); header values must already be resolved.
    ///
    /// # Errors
    /// [`BuildError`] naming the header whose value is not valid in HTTP.
    pub fn for_destination(
        name: &str,
        dest: &HttpConfig,
    ) -> Result<Option<HttpLookup>, BuildError> {
        let signer = crate::http::signer(name, dest)?;
        Ok(
            HttpLookup::configured(name, dest.lookup.as_ref(), &dest.headers)?
                .map(|l| HttpLookup { signer, ..l }),
        )
    }

    /// The lookup `settings` of destination `name` (of any kind), sending the lookup's own
    /// headers when configured, else the destination's `headers` (resolved).
    ///
    /// # Errors
    /// [`BuildError`] naming the header whose value is not valid in HTTP.
    pub fn configured(
        name: &str,
        settings: Option<&LookupSettings>,
        headers: &BTreeMap<config::HeaderName, config::HeaderValue>,
    ) -> Result<Option<HttpLookup>, BuildError> {
        let Some(settings) = settings else {
            return Ok(None);
        };
        let mut headers = match &settings.headers {
            Some(own) => header_map(name, "lookup.headers", own)?,
            None => header_map(name, "headers", headers)?,
        };
        headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
        HttpLookup::new(name, settings, headers).map(Some)
    }

    /// A lookup of destination `name` for `settings`, sending `headers` with every request and
    /// following no redirect.
    ///
    /// # Errors
    /// [`BuildError`] when the HTTP client cannot be built.
    pub fn new(
        name: &str,
        settings: &LookupSettings,
        headers: HeaderMap,
    ) -> Result<HttpLookup, BuildError> {
        install_crypto_provider();
        Ok(HttpLookup {
            client: crate::http::client(name, crate::http::client_builder())?,
            settings: settings.clone(),
            headers,
            signer: None,
        })
    }

    /// The configured settings.
    pub fn settings(&self) -> &LookupSettings {
        &self.settings
    }

    /// The URL looked up for `key` and `external_reference`, each percent-encoded where the
    /// template names it. Nothing a value holds may change which resource is asked for: a value
    /// that would be empty (a listing instead of one object) or would form a dot segment of the
    /// path (which every URL parser resolves to another path) is refused.
    ///
    /// # Errors
    /// Why this key or reference cannot be looked up with this template.
    pub fn url(&self, key: &str, external_reference: Option<&str>) -> Result<reqwest::Url, String> {
        let template = self.settings.url.as_str();
        let mut text = template.to_owned();
        for (placeholder, value) in [
            ("{key}", Some(key)),
            ("{external_reference}", external_reference),
        ] {
            if !template.contains(placeholder) {
                continue;
            }
            let value = value.unwrap_or_default();
            if value.is_empty() {
                let what = &placeholder[1..placeholder.len() - 1];
                return Err(format!(
                    "no {what} to look up: {placeholder} would be empty, and an empty value asks \
                     for another resource (a listing)"
                ));
            }
            text = text.replace(placeholder, &encode(value));
        }
        if written_path(&text).split('/').any(is_dot_segment) {
            return Err(format!(
                "{key:?} or its reference would make a dot segment of the lookup URL's path, \
                 which names another resource: it cannot be looked up"
            ));
        }
        reqwest::Url::parse(&text).map_err(|e| format!("the lookup URL is not valid: {e}"))
    }

    /// The lookup URL for `key` and `external_reference` as errors and logs show it: scheme,
    /// host and path, never the query (which may carry a credential).
    pub fn shown_url(&self, key: &str, external_reference: Option<&str>) -> String {
        match self.url(key, external_reference) {
            Ok(url) => shown(&url),
            Err(_) => shown_template(self.settings.url.as_str()),
        }
    }

    /// Looks `tenant`'s delivery key `key` up. A 404 means nothing was found. The request
    /// carries the tenant (`X-Oncebox-Tenant`) and the key (`Idempotency-Key`) beside the URL:
    /// one credential serves every tenant, and the receiver answers only with objects of that
    /// key, which no other tenant's intent can carry.
    pub async fn lookup(
        &self,
        tenant: &str,
        key: &str,
        external_reference: Option<&str>,
    ) -> LookupResult {
        let url = match self.url(key, external_reference) {
            Ok(url) => url,
            Err(detail) => {
                return LookupResult::Failed {
                    transient: false,
                    detail,
                };
            }
        };
        let timeout = self.settings.timeout.get();
        match tokio::time::timeout(timeout, self.get(&url, tenant, key)).await {
            Ok(r) => r,
            Err(_) => LookupResult::Failed {
                transient: true,
                detail: format!("GET {}: no answer within {timeout:?}", shown(&url)),
            },
        }
    }

    async fn get(&self, url: &reqwest::Url, tenant: &str, key: &str) -> LookupResult {
        let at = shown(url);
        let mut request = self.client.get(url.clone()).headers(self.headers.clone());
        // Keys and tenants are printable ASCII: always valid header values.
        if let (Ok(tenant), Ok(key)) = (HeaderValue::from_str(tenant), HeaderValue::from_str(key)) {
            request = request
                .header(crate::http::TENANT, tenant)
                .header(crate::http::IDEMPOTENCY_KEY, key);
        }
        if let Some(signer) = &self.signer {
            // Lookups are signed too: the key, the time, an empty body.
            request = request.headers(crate::http::signature_headers(signer, key, b""));
        }
        let mut response = match request
            .timeout(self.settings.timeout.get() + Duration::from_millis(100))
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => {
                return LookupResult::Failed {
                    transient: true,
                    detail: format!("GET {at}: {}", crate::http::error_text(e)),
                };
            }
        };
        let status = response.status().as_u16();
        if status == 404 {
            return LookupResult::Found(Vec::new());
        }
        if (300..400).contains(&status) {
            // Never followed: the answer would come from elsewhere, with our credentials sent on.
            return LookupResult::Failed {
                transient: false,
                detail: format!(
                    "GET {at}: HTTP {status}, a redirect{} (not followed)",
                    crate::http::location(response.headers())
                ),
            };
        }
        if !(200..300).contains(&status) {
            return LookupResult::Failed {
                transient: status >= 500 || status == 408 || status == 429,
                detail: format!("GET {at}: HTTP {status}"),
            };
        }
        let body = match read_bounded(&mut response, &at).await {
            Ok(body) => body,
            Err(failed) => return failed,
        };
        let doc: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return LookupResult::Failed {
                    transient: false,
                    detail: format!("GET {at}: answer is not JSON: {e}"),
                };
            }
        };
        self.found_in(&doc, &at)
    }

    /// The objects the lookup's `results_pointer` names in answer `doc` (from `at`).
    fn found_in(&self, doc: &Value, at: &str) -> LookupResult {
        match doc.pointer(self.settings.results_pointer.as_str()) {
            Some(Value::Array(items)) => LookupResult::Found(items.clone()),
            Some(Value::Null) | None => LookupResult::Found(Vec::new()),
            Some(obj @ Value::Object(_)) => LookupResult::Found(vec![obj.clone()]),
            Some(other) => LookupResult::Failed {
                transient: false,
                detail: format!(
                    "GET {at}: {:?} holds a {}, not a list of objects",
                    self.settings.results_pointer,
                    kind_of(other)
                ),
            },
        }
    }
}

/// A lookup answer's body (from `at`), refused as soon as it passes [`MAX_LOOKUP_BYTES`] or
/// announces more.
async fn read_bounded(response: &mut reqwest::Response, at: &str) -> Result<Vec<u8>, LookupResult> {
    let too_large = || LookupResult::Failed {
        transient: false,
        detail: format!("GET {at}: the answer exceeds {MAX_LOOKUP_BYTES} bytes"),
    };
    if response
        .content_length()
        .is_some_and(|n| n > MAX_LOOKUP_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if body.len() + chunk.len() > MAX_LOOKUP_BYTES => {
                return Err(too_large());
            }
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) => return Ok(body),
            Err(e) => {
                return Err(LookupResult::Failed {
                    transient: true,
                    detail: format!("GET {at}: answer broke off: {}", crate::http::error_text(e)),
                });
            }
        }
    }
}

/// What kind of JSON value `v` is, for an error that must not echo the value.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncebox_core::config::{HttpUrl, JsonPointer};
    use oncebox_core::duration::NonZeroDuration;

    fn lookup(template: &str) -> HttpLookup {
        let settings = LookupSettings {
            url: HttpUrl::parse(template.into()).expect("url"),
            results_pointer: JsonPointer::parse("/data".into()).expect("pointer"),
            fields: Vec::new(),
            reference_pointer: None,
            timeout: NonZeroDuration::from_secs(1),
            headers: None,
        };
        HttpLookup::new("d", &settings, HeaderMap::new()).expect("lookup")
    }

    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(encode("order-8172_a.b~c"), "order-8172_a.b~c");
        assert_eq!(encode("a/b?c=d&e#f"), "a%2Fb%3Fc%3Dd%26e%23f");
    }

    /// Why dot segments are refused rather than encoded: a URL parser resolves them, and their
    /// percent-encoded spellings too, to another path.
    #[test]
    fn url_parsers_resolve_dot_segments_even_encoded() {
        for dotted in [
            "http://h/refunds/..",
            "http://h/refunds/%2E%2E",
            "http://h/refunds/.%2e",
        ] {
            let url = reqwest::Url::parse(dotted).expect("url");
            assert_eq!(url.path(), "/", "{dotted}");
        }
    }

    #[test]
    fn a_value_never_changes_the_path_it_is_put_in() {
        let path = lookup("http://h/refunds/{key}");
        for key in [".", ".."] {
            let refused = path.url(key, None).expect_err(key);
            assert!(refused.contains("dot segment"), "{key}: {refused}");
        }
        // A percent sign is encoded itself: the receiver is asked for the key as written.
        for (key, sent) in [("%2E", "%252E"), (".%2e", ".%252e")] {
            let url = path.url(key, None).expect(key);
            assert_eq!(url.path(), format!("/refunds/{sent}"));
        }
        let url = path.url("a/../b", None).expect("one segment");
        assert_eq!(url.path(), "/refunds/a%2F..%2Fb");
        assert_eq!(
            path.url("...", None).expect("not a dot segment").path(),
            "/refunds/..."
        );
        let query = lookup("http://h/find?key={key}");
        for key in [".", "..", "a/../b"] {
            let url = query.url(key, None).expect(key);
            assert_eq!(url.path(), "/find", "{key}");
            let found: Vec<(String, String)> = url.query_pairs().into_owned().collect();
            assert_eq!(found, [("key".to_owned(), key.to_owned())]);
        }
    }

    #[test]
    fn an_empty_value_is_refused_rather_than_asking_for_a_listing() {
        let by_reference = lookup("http://h/refunds/{external_reference}");
        let refused = by_reference.url("k", None).expect_err("no reference");
        assert!(refused.contains("external_reference"), "{refused}");
        assert!(by_reference.url("k", Some("")).is_err());
        assert!(by_reference.url("k", Some("..")).is_err());
        assert_eq!(
            by_reference
                .url("k", Some("re-1"))
                .expect("reference")
                .path(),
            "/refunds/re-1"
        );
        let query = lookup("http://h/refunds?ref={external_reference}&key={key}");
        assert!(query.url("k", None).is_err());
    }

    #[test]
    fn errors_show_the_url_without_its_query() {
        let l = lookup("https://user:pw@h:8443/find/{key}?api_key=s3cret");
        assert_eq!(l.shown_url("k-1", None), "https://h:8443/find/k-1");
        assert_eq!(l.shown_url("..", None), "https://h:8443/find/{key}");
    }
}
