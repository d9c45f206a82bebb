//! Reconciliation lookups: find the effects of an intent at its destination by key.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use oncebox_core::config::{self, HttpConfig, LookupSettings};
use oncebox_inbox::webhook::Signer;
use reqwest::header::{ACCEPT, HeaderMap, HeaderValue};
use serde_json::Value;

use crate::BuildError;
use crate::http::{MAX_RESPONSE_BYTES, header_map, install_crypto_provider};

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
        Ok(Some(HttpLookup::new(settings, headers)))
    }

    /// A lookup for `settings` sending `headers` with every request.
    pub fn new(settings: &LookupSettings, headers: HeaderMap) -> HttpLookup {
        install_crypto_provider();
        HttpLookup {
            client: reqwest::Client::new(),
            settings: settings.clone(),
            headers,
            signer: None,
        }
    }

    /// The configured settings.
    pub fn settings(&self) -> &LookupSettings {
        &self.settings
    }

    /// The URL looked up for `key` and `external_reference`.
    pub fn url(&self, key: &str, external_reference: Option<&str>) -> String {
        self.settings
            .url
            .as_str()
            .replace("{key}", &encode(key))
            .replace(
                "{external_reference}",
                &encode(external_reference.unwrap_or_default()),
            )
    }

    /// Looks the key up. A 404 means nothing was found.
    pub async fn lookup(&self, key: &str, external_reference: Option<&str>) -> LookupResult {
        let url = self.url(key, external_reference);
        let timeout = self.settings.timeout.get();
        match tokio::time::timeout(timeout, self.get(&url, key)).await {
            Ok(r) => r,
            Err(_) => LookupResult::Failed {
                transient: true,
                detail: format!("GET {url}: no answer within {timeout:?}"),
            },
        }
    }

    async fn get(&self, url: &str, key: &str) -> LookupResult {
        let mut request = self.client.get(url).headers(self.headers.clone());
        if let Some(signer) = &self.signer {
            // Lookups are signed too: the key, the time, an empty body.
            request = request.headers(crate::http::signature_headers(signer, key, b""));
        }
        let response = match request
            .timeout(self.settings.timeout.get() + Duration::from_millis(100))
            .send()
            .await
        {
            Ok(r) => r,
            Err(e) => {
                return LookupResult::Failed {
                    transient: true,
                    detail: format!("GET {url}: {e}"),
                };
            }
        };
        let status = response.status().as_u16();
        if status == 404 {
            return LookupResult::Found(Vec::new());
        }
        if !(200..300).contains(&status) {
            return LookupResult::Failed {
                transient: status >= 500 || status == 408 || status == 429,
                detail: format!("GET {url}: HTTP {status}"),
            };
        }
        let body = match response.bytes().await {
            Ok(b) if b.len() <= 16 * MAX_RESPONSE_BYTES => b,
            Ok(b) => {
                return LookupResult::Failed {
                    transient: false,
                    detail: format!("GET {url}: answer of {} bytes is too large", b.len()),
                };
            }
            Err(e) => {
                return LookupResult::Failed {
                    transient: true,
                    detail: format!("GET {url}: answer broke off: {e}"),
                };
            }
        };
        let doc: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return LookupResult::Failed {
                    transient: false,
                    detail: format!("GET {url}: answer is not JSON: {e}"),
                };
            }
        };
        match doc.pointer(self.settings.results_pointer.as_str()) {
            Some(Value::Array(items)) => LookupResult::Found(items.clone()),
            Some(Value::Null) | None => LookupResult::Found(Vec::new()),
            Some(obj @ Value::Object(_)) => LookupResult::Found(vec![obj.clone()]),
            Some(other) => LookupResult::Failed {
                transient: false,
                detail: format!(
                    "GET {url}: {:?} holds {other}, not a list of objects",
                    self.settings.results_pointer
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn keys_are_percent_encoded() {
        assert_eq!(encode("order-8172_a.b~c"), "order-8172_a.b~c");
        assert_eq!(encode("a/b?c=d&e#f"), "a%2Fb%3Fc%3Dd%26e%23f");
    }
}
