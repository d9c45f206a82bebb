//! Value types of the configuration that refuse bad values as they are read, so that no
//! hand-written check has to remember them: an HTTP URL, a JSON pointer, an HTTP status, a
//! header name, and a header value (or URL) that may read secrets from the environment.

use std::fmt;

use serde::{Deserialize, Deserializer};

use super::ConfigError;

/// Implements `Deserialize` for a string newtype through its `parse` function.
macro_rules! parsed_string {
    ($ty:ident) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                $ty::parse(text).map_err(serde::de::Error::custom)
            }
        }
    };
}

/// An `http://` or `https://` URL (a lookup's may hold `{key}` placeholders).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl(String);

impl HttpUrl {
    /// `text`, when it starts with `http://` or `https://`.
    ///
    /// # Errors
    /// A message saying what is expected.
    pub fn parse(text: String) -> Result<HttpUrl, String> {
        if text.starts_with("http://") || text.starts_with("https://") {
            Ok(HttpUrl(text))
        } else {
            Err(format!("{text:?} must start with http:// or https://"))
        }
    }

    /// The URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

parsed_string!(HttpUrl);

/// An RFC 6901 JSON pointer: empty (the whole document) or `/`-separated, `~` escaped as `~0`
/// and `~1`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JsonPointer(String);

impl JsonPointer {
    /// `text`, when it is a JSON pointer.
    ///
    /// # Errors
    /// A message saying what a pointer looks like.
    pub fn parse(text: String) -> Result<JsonPointer, String> {
        let mut chars = text.chars();
        let mut escapes_ok = true;
        while let Some(c) = chars.next() {
            if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
                escapes_ok = false;
            }
        }
        if (text.is_empty() || text.starts_with('/')) && escapes_ok {
            Ok(JsonPointer(text))
        } else {
            Err(format!(
                "{text:?} must be a JSON pointer such as \"/id\" (empty, or starting with '/')"
            ))
        }
    }

    /// The pointer.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True for the empty pointer, the whole document.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

parsed_string!(JsonPointer);

/// An HTTP status code, 100–599.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HttpStatus(u16);

impl HttpStatus {
    /// The code.
    pub fn get(self) -> u16 {
        self.0
    }
}

impl<'de> Deserialize<'de> for HttpStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u16::deserialize(d)?;
        if (100..=599).contains(&n) {
            Ok(HttpStatus(n))
        } else {
            Err(serde::de::Error::custom(format!(
                "{n} is not an HTTP status (100-599)"
            )))
        }
    }
}

/// An HTTP header name: letters, digits, `-` and `_`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeaderName(String);

impl HeaderName {
    /// `text`, when it is a valid header name.
    ///
    /// # Errors
    /// A message saying what is allowed.
    pub fn parse(text: String) -> Result<HeaderName, String> {
        if !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            Ok(HeaderName(text))
        } else {
            Err(format!(
                "{text:?} is not a valid header name (letters, digits, '-' and '_')"
            ))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

parsed_string!(HeaderName);

impl fmt::Display for HeaderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A header value (or broker URL) that may read secrets from the environment (`${NAME}`),
/// resolved once at start-up by [`super::Config::resolve_env`]. Its `Debug` form never shows
/// the value.
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderValue(String);

impl HeaderValue {
    /// `text`, when its `${NAME}` references are well formed.
    ///
    /// # Errors
    /// A message naming the bad reference.
    pub fn parse(text: String) -> Result<HeaderValue, String> {
        env_references(&text)?;
        Ok(HeaderValue(text))
    }

    /// The value, with environment references resolved once `resolve_env` ran.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replaces each `${NAME}` by the variable `NAME` read through `lookup`; errors name
    /// `field`.
    pub(super) fn resolve(
        &mut self,
        field: &str,
        lookup: &impl Fn(&str) -> Option<String>,
    ) -> Result<(), ConfigError> {
        let mut out = String::new();
        let mut rest = self.0.as_str();
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..]
                .find('}')
                .map(|e| start + e)
                .unwrap_or(rest.len());
            let var = &rest[start + 2..end];
            let resolved = lookup(var).ok_or_else(|| {
                ConfigError::new(field, format!("environment variable {var} is not set"))
            })?;
            out.push_str(&resolved);
            rest = &rest[(end + 1).min(rest.len())..];
        }
        out.push_str(rest);
        self.0 = out;
        Ok(())
    }
}

parsed_string!(HeaderValue);

impl fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HeaderValue(<redacted>)")
    }
}

/// Checks the `${NAME}` references of a template.
fn env_references(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        let Some(end) = rest[start..].find('}') else {
            return Err("\"${\" without its closing \"}\"".into());
        };
        let var = &rest[start + 2..start + end];
        if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(format!("${{{var}}} is not an environment variable name"));
        }
        rest = &rest[start + end + 1..];
    }
    Ok(())
}
