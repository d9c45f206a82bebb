//! JSON text read exactly: every intake path (the HTTP API, the CLI, the library's text entry,
//! the bindings) parses with [`parse`], which refuses what a `serde_json::Value` cannot hold.
//!
//! serde_json (without `arbitrary_precision`) turns an integer literal beyond the 64-bit range
//! into a float: `123456789012345678901234567890` becomes `1.2345678901234568e+29`. So the rule
//! is on numbers, however written: any number beyond ±2^53 is refused, naming its JSON pointer
//! ([`find_unsafe_number`], the same check a `Value` from the library gets) — beyond it doubles
//! no longer hold every integer, and RFC 8785 would hash distinct values alike. Literals too
//! large even for a double (`1e400`, a 400-digit integer), which serde_json refuses as "number
//! out of range", are found in the text ([`find_unsafe_literal`]) and refused the same
//! way.

use std::fmt;

use serde_json::Value;

use crate::hash::{MAX_SAFE_INTEGER, find_unsafe_number};

/// What the refusal of a number beyond ±2^53 says, wherever it is found.
pub const UNSAFE_NUMBER: &str = "number beyond ±2^53, which the request hash (RFC 8785) would \
     round into another; send large ids and exact amounts as strings";

/// Why JSON text was refused.
#[derive(Debug)]
pub enum JsonError {
    /// Not JSON at all.
    Syntax(serde_json::Error),
    /// A number beyond ±2^53 at this JSON pointer (RFC 6901; `""` is the document).
    UnsafeNumber {
        /// Where the integer is.
        pointer: String,
    },
}

impl JsonError {
    /// The JSON pointer the error is about, if it is about one value.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            JsonError::Syntax(_) => None,
            JsonError::UnsafeNumber { pointer } => Some(pointer),
        }
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonError::Syntax(e) => write!(f, "not valid JSON: {e}"),
            JsonError::UnsafeNumber { .. } => f.write_str(UNSAFE_NUMBER),
        }
    }
}

impl std::error::Error for JsonError {}

/// Parses JSON text, refusing numbers beyond ±2^53 of any size and spelling (see the module).
///
/// # Errors
/// [`JsonError::Syntax`] for text that is not JSON, [`JsonError::UnsafeNumber`] naming the
/// first such number.
pub fn parse(text: &[u8]) -> Result<Value, JsonError> {
    let value: Value = match serde_json::from_slice(text) {
        Ok(value) => value,
        // serde_json refuses integers beyond a double's range as "number out of range": the
        // client is better told to send it as a string.
        Err(e) => {
            return Err(match find_unsafe_number_literal(text) {
                Some(pointer) => JsonError::UnsafeNumber { pointer },
                None => JsonError::Syntax(e),
            });
        }
    };
    // Integers within the 64-bit range are still integers in the Value; beyond it only the
    // text knows.
    let pointer = find_unsafe_number(&value).or_else(|| find_unsafe_number_literal(text));
    match pointer {
        Some(pointer) => Err(JsonError::UnsafeNumber { pointer }),
        None => Ok(value),
    }
}

/// One open container while scanning.
enum Frame {
    /// Inside an object: the member name last read.
    Object(String),
    /// Inside an array: the index of the current element.
    Array(usize),
}

/// The JSON pointer of the first number literal in `text` whose magnitude exceeds 2^53 (an
/// integer of any length, or a float up to infinity); `None` when there is none. `text` should be JSON that serde_json
/// accepted: the scan checks no syntax.
pub fn find_unsafe_number_literal(text: &[u8]) -> Option<String> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'{' => stack.push(Frame::Object(String::new())),
            b'[' => stack.push(Frame::Array(0)),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => {
                if let Some(Frame::Array(index)) = stack.last_mut() {
                    *index += 1;
                }
            }
            b'"' => {
                let end = string_end(text, i);
                let is_name = matches!(stack.last(), Some(Frame::Object(_)))
                    && text[end..]
                        .iter()
                        .find(|b| !b.is_ascii_whitespace())
                        .is_some_and(|&b| b == b':');
                if is_name && let Some(Frame::Object(name)) = stack.last_mut() {
                    *name = serde_json::from_slice(&text[i..end]).unwrap_or_default();
                }
                i = end;
                continue;
            }
            b'-' | b'0'..=b'9' => {
                let end = text[i..]
                    .iter()
                    .position(|b| !matches!(b, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                    .map_or(text.len(), |n| i + n);
                if unsafe_literal(&text[i..end]) {
                    return Some(pointer(&stack));
                }
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index just past the string literal that opens at `start`.
fn string_end(text: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < text.len() {
        match text[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    text.len()
}

/// Whether a number literal's magnitude exceeds 2^53: an integer exactly, a float by its
/// value as a double (`1e400` is infinite).
fn unsafe_literal(literal: &[u8]) -> bool {
    let digits = literal.strip_prefix(b"-").unwrap_or(literal);
    if !digits.iter().all(u8::is_ascii_digit) {
        return std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<f64>().ok())
            .is_some_and(|f| f.abs() > MAX_SAFE_INTEGER as f64);
    }
    // u128 holds 38 digits; anything longer is far beyond 2^53.
    digits.len() > 38
        || std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<u128>().ok())
            .is_some_and(|n| n > u128::from(MAX_SAFE_INTEGER))
}

/// The RFC 6901 pointer of the position `stack` describes.
fn pointer(stack: &[Frame]) -> String {
    let mut out = String::new();
    for frame in stack {
        out.push('/');
        match frame {
            Frame::Object(name) => out.push_str(&name.replace('~', "~0").replace('/', "~1")),
            Frame::Array(index) => out.push_str(&index.to_string()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(text: &str) -> Option<String> {
        match parse(text.as_bytes()) {
            Err(JsonError::UnsafeNumber { pointer }) => Some(pointer),
            Err(e) => panic!("{text}: {e}"),
            Ok(_) => None,
        }
    }

    #[test]
    fn integers_beyond_the_64_bit_range_are_refused_with_their_pointer() {
        let long = format!(r#"{{"n": {}}}"#, "9".repeat(400));
        for (text, want) in [
            (r#"{"n": 123456789012345678901234567890}"#, "/n"),
            (r#"{"n": 18446744073709551616}"#, "/n"),
            (r#"{"n": -9223372036854775809}"#, "/n"),
            (
                r#"{"a": [1, 2, {"b/c~": 1000000000000000000000}]}"#,
                "/a/2/b~1c~0",
            ),
            (long.as_str(), "/n"),
            (r#"[0, [], {}, "x\"y,", 99999999999999999999]"#, "/4"),
            (
                r#"{"a\u0022b": {"c": [ 1 , 2 ,99999999999999999999 ]}}"#,
                "/a\"b/c/2",
            ),
            ("99999999999999999999", ""),
        ] {
            assert_eq!(refused(text).as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn integers_between_2_pow_53_and_2_pow_64_are_refused_too() {
        assert_eq!(refused(r#"{"n": 9007199254740993}"#).as_deref(), Some("/n"));
        assert_eq!(
            refused(r#"{"n": -9007199254740993}"#).as_deref(),
            Some("/n")
        );
    }

    #[test]
    fn floats_beyond_2_pow_53_are_refused_whatever_their_spelling() {
        for (text, want) in [
            (r#"{"f": 7e20}"#, "/f"),
            (r#"{"f": [1.5e300]}"#, "/f/0"),
            (r#"{"h": 123456789012345678901234567890.0}"#, "/h"),
            (r#"{"f": 1e400}"#, "/f"),
        ] {
            assert_eq!(refused(text).as_deref(), Some(want), "{text}");
        }
    }

    #[test]
    fn exact_numbers_small_floats_and_strings_pass() {
        for text in [
            r#"{"n": 9007199254740992, "m": -9007199254740992}"#,
            r#"{"f": 1.5e-300, "g": 2.5E15, "h": 0.1, "i": 9007199254740992.0}"#,
            r#"{"s": "123456789012345678901234567890", "123456789012345678901234567890": 1}"#,
            r#"{"t": [true, false, null, -0, 0.1e-7]}"#,
        ] {
            assert_eq!(refused(text), None, "{text}");
        }
        assert_eq!(
            parse(br#"{"n": 1}"#).expect("parses"),
            json!({"n": 1}),
            "the value is serde_json's own"
        );
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        assert!(matches!(parse(b"{\"n\": }"), Err(JsonError::Syntax(_))));
        assert!(
            parse(b"{")
                .expect_err("not JSON")
                .to_string()
                .starts_with("not valid JSON")
        );
    }
}
