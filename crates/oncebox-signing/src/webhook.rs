//! Standard Webhooks signatures (<https://www.standardwebhooks.com>): what oncebox's HTTP
//! destinations sign with, and what a receiver written in Rust verifies with.
//!
//! A request carries `webhook-id` (the intent's idempotency key: the same on every retry),
//! `webhook-timestamp` (Unix seconds of this attempt) and `webhook-signature`: a space-separated
//! list of `v1,<base64 HMAC-SHA256>` (a `whsec_` secret) and `v1a,<base64 Ed25519>` (a `whsk_`
//! signing key; receivers hold its `whpk_` public key) signatures over `id.timestamp.body` — one
//! per configured secret, so that secrets rotate without a gap (sign with the new and the old,
//! then drop the old). A receiver accepts the request when any signature verifies with any key
//! it trusts and the timestamp is within its tolerance (five minutes by the spec's advice).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};

/// The request header naming the message: the idempotency key.
pub const HEADER_ID: &str = "webhook-id";
/// The request header with the attempt's Unix time in seconds.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// The request header with the signatures.
pub const HEADER_SIGNATURE: &str = "webhook-signature";

/// The tolerance the spec advises for the timestamp: five minutes either way.
pub const DEFAULT_TOLERANCE_SECS: i64 = 5 * 60;

/// A key or secret that cannot be used, and why (never showing it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KeyError(String);

/// Why a request's signature was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A `webhook-*` header is missing or malformed.
    #[error("the {0} header is missing or malformed")]
    Header(&'static str),
    /// The timestamp is further from now than the tolerance.
    #[error("the timestamp is {0} s from now, beyond the tolerance")]
    Timestamp(i64),
    /// No signature verified with any trusted key.
    #[error("no signature matches a trusted key")]
    NoMatch,
}

/// One signing secret: `whsec_…` (HMAC-SHA256, scheme `v1`) or `whsk_…` (Ed25519, `v1a`).
pub enum SigningKey {
    /// A shared secret (24 to 512 bytes).
    Symmetric(Vec<u8>),
    /// An Ed25519 key pair.
    Ed25519(Ed25519KeyPair),
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SigningKey::Symmetric(_) => f.write_str("SigningKey::Symmetric(<redacted>)"),
            SigningKey::Ed25519(_) => f.write_str("SigningKey::Ed25519(<redacted>)"),
        }
    }
}

fn decode(what: &str, b64: &str) -> Result<Vec<u8>, KeyError> {
    B64.decode(b64.trim())
        .map_err(|_| KeyError(format!("the part after {what} is not base64")))
}

impl SigningKey {
    /// Parses a `whsec_` secret or a `whsk_` Ed25519 key (its 32-byte seed, or the seed followed
    /// by the 32-byte public key, base64).
    ///
    /// # Errors
    /// [`KeyError`] saying what is wrong, never echoing the secret.
    pub fn parse(text: &str) -> Result<SigningKey, KeyError> {
        if let Some(b64) = text.strip_prefix("whsec_") {
            let secret = decode("whsec_", b64)?;
            if !(24..=512).contains(&secret.len()) {
                return Err(KeyError(format!(
                    "a whsec_ secret must hold 24 to 512 bytes, not {}",
                    secret.len()
                )));
            }
            return Ok(SigningKey::Symmetric(secret));
        }
        if let Some(b64) = text.strip_prefix("whsk_") {
            let bytes = decode("whsk_", b64)?;
            let (seed, public) = match bytes.len() {
                32 => (&bytes[..], None),
                64 => (&bytes[..32], Some(&bytes[32..])),
                n => {
                    return Err(KeyError(format!(
                        "a whsk_ key must hold a 32-byte seed (or seed and public key, 64 \
                         bytes), not {n} bytes"
                    )));
                }
            };
            let pair = match public {
                Some(p) => Ed25519KeyPair::from_seed_and_public_key(seed, p),
                None => Ed25519KeyPair::from_seed_unchecked(seed),
            }
            .map_err(|_| KeyError("the whsk_ key is not a valid Ed25519 key".into()))?;
            return Ok(SigningKey::Ed25519(pair));
        }
        Err(KeyError(
            "a signing secret starts with whsec_ (HMAC-SHA256) or whsk_ (Ed25519)".into(),
        ))
    }

    /// The key receivers verify with: the same `whsec_` secret, or the `whpk_` public key.
    pub fn verifying_key(&self) -> VerifyingKey {
        match self {
            SigningKey::Symmetric(s) => VerifyingKey::Symmetric(s.clone()),
            SigningKey::Ed25519(pair) => {
                let mut public = [0u8; 32];
                public.copy_from_slice(pair.public_key().as_ref());
                VerifyingKey::Ed25519(public)
            }
        }
    }

    /// This key's signature of `content`, with its scheme: `v1,…` or `v1a,…`.
    fn sign(&self, content: &[u8]) -> String {
        match self {
            SigningKey::Symmetric(secret) => {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
                format!("v1,{}", B64.encode(ring::hmac::sign(&key, content)))
            }
            SigningKey::Ed25519(pair) => format!("v1a,{}", B64.encode(pair.sign(content))),
        }
    }
}

/// A key a receiver trusts: a `whsec_` secret or a `whpk_` Ed25519 public key.
#[derive(Clone, PartialEq, Eq)]
pub enum VerifyingKey {
    /// The shared secret.
    Symmetric(Vec<u8>),
    /// An Ed25519 public key.
    Ed25519([u8; 32]),
}

impl fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerifyingKey::Symmetric(_) => f.write_str("VerifyingKey::Symmetric(<redacted>)"),
            VerifyingKey::Ed25519(p) => write!(f, "VerifyingKey::Ed25519({})", B64.encode(p)),
        }
    }
}

impl VerifyingKey {
    /// Parses a `whsec_` secret or a `whpk_` public key.
    ///
    /// # Errors
    /// [`KeyError`] saying what is wrong.
    pub fn parse(text: &str) -> Result<VerifyingKey, KeyError> {
        if let Some(b64) = text.strip_prefix("whpk_") {
            let bytes = decode("whpk_", b64)?;
            let public: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| {
                KeyError(format!("a whpk_ key holds 32 bytes, not {}", b.len()))
            })?;
            return Ok(VerifyingKey::Ed25519(public));
        }
        match SigningKey::parse(text) {
            Ok(SigningKey::Symmetric(s)) => Ok(VerifyingKey::Symmetric(s)),
            Ok(SigningKey::Ed25519(_)) => Err(KeyError(
                "a receiver verifies with the whpk_ public key, not the whsk_ signing key".into(),
            )),
            Err(_) => Err(KeyError(
                "a verifying key starts with whsec_ (HMAC-SHA256) or whpk_ (Ed25519)".into(),
            )),
        }
    }

    /// Its text form: `whsec_…` or `whpk_…`.
    pub fn to_text(&self) -> String {
        match self {
            VerifyingKey::Symmetric(s) => format!("whsec_{}", B64.encode(s)),
            VerifyingKey::Ed25519(p) => format!("whpk_{}", B64.encode(p)),
        }
    }

    fn verifies(&self, scheme: &str, signature: &[u8], content: &[u8]) -> bool {
        match (self, scheme) {
            (VerifyingKey::Symmetric(secret), "v1") => {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
                ring::hmac::verify(&key, content, signature).is_ok()
            }
            (VerifyingKey::Ed25519(public), "v1a") => UnparsedPublicKey::new(&ED25519, public)
                .verify(content, signature)
                .is_ok(),
            _ => false,
        }
    }
}

/// The content signed: `id.timestamp.body`.
fn signed_content(id: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut content = Vec::with_capacity(id.len() + body.len() + 24);
    content.extend_from_slice(id.as_bytes());
    content.push(b'.');
    content.extend_from_slice(timestamp.to_string().as_bytes());
    content.push(b'.');
    content.extend_from_slice(body);
    content
}

/// Signs requests with every configured key (several during a rotation).
#[derive(Debug)]
pub struct Signer {
    keys: Vec<SigningKey>,
}

impl Signer {
    /// A signer over `secrets` (each `whsec_…` or `whsk_…`), in order.
    ///
    /// # Errors
    /// The index of the first unusable secret and why; an empty list.
    pub fn new<S: AsRef<str>>(secrets: &[S]) -> Result<Signer, (usize, KeyError)> {
        if secrets.is_empty() {
            return Err((0, KeyError("name at least one secret".into())));
        }
        let keys = secrets
            .iter()
            .enumerate()
            .map(|(i, s)| SigningKey::parse(s.as_ref()).map_err(|e| (i, e)))
            .collect::<Result<_, _>>()?;
        Ok(Signer { keys })
    }

    /// The `webhook-signature` value for message `id` at `timestamp` with `body`: one
    /// signature per key, space-separated.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        let content = signed_content(id, timestamp, body);
        self.keys
            .iter()
            .map(|k| k.sign(&content))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The keys receivers verify with, one per signing key.
    pub fn verifying_keys(&self) -> Vec<VerifyingKey> {
        self.keys.iter().map(SigningKey::verifying_key).collect()
    }
}

/// Verifies a request: its `webhook-id`, `webhook-timestamp` and `webhook-signature` header
/// values, its body exactly as received, against the keys the receiver trusts, at `now` (Unix
/// seconds) within `tolerance_secs` either way. Accepts when any signature verifies with any
/// trusted key of its scheme (HMAC comparisons are constant-time).
///
/// # Errors
/// [`VerifyError`] saying which check failed.
pub fn verify(
    trusted: &[VerifyingKey],
    id: Option<&str>,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
    tolerance_secs: i64,
) -> Result<(), VerifyError> {
    let id = id
        .filter(|i| !i.is_empty())
        .ok_or(VerifyError::Header(HEADER_ID))?;
    let timestamp: i64 = timestamp
        .and_then(|t| t.trim().parse().ok())
        .ok_or(VerifyError::Header(HEADER_TIMESTAMP))?;
    let signature = signature
        .filter(|s| !s.trim().is_empty())
        .ok_or(VerifyError::Header(HEADER_SIGNATURE))?;
    let skew = timestamp.saturating_sub(now);
    if skew.abs() > tolerance_secs {
        return Err(VerifyError::Timestamp(skew));
    }
    let content = signed_content(id, timestamp, body);
    for versioned in signature.split(' ').filter(|s| !s.is_empty()) {
        let Some((scheme, b64)) = versioned.split_once(',') else {
            continue;
        };
        let Ok(sig) = B64.decode(b64) else {
            continue;
        };
        if trusted.iter().any(|k| k.verifies(scheme, &sig, &content)) {
            return Ok(());
        }
    }
    Err(VerifyError::NoMatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_764_590_000;

    fn hmac_secret(fill: u8) -> String {
        format!("whsec_{}", B64.encode([fill; 32]))
    }

    fn ed_key(fill: u8) -> String {
        format!("whsk_{}", B64.encode([fill; 32]))
    }

    #[test]
    fn the_spec_example_verifies() {
        // The example of the Standard Webhooks specification's test vectors.
        let key = VerifyingKey::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("secret");
        let body = br#"{"test": 2432232314}"#;
        let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let at = 1_614_265_330;
        let ok = verify(
            std::slice::from_ref(&key),
            Some("msg_p5jXN8AQM9LWM0D4loKWxJek"),
            Some(&at.to_string()),
            Some(sig),
            body,
            at,
            300,
        );
        assert_eq!(ok, Ok(()));
        // The same request with a changed body, id or timestamp does not.
        let bad = verify(
            &[key],
            Some("msg_p5jXN8AQM9LWM0D4loKWxJek"),
            Some(&at.to_string()),
            Some(sig),
            br#"{"test": 2432232315}"#,
            at,
            300,
        );
        assert_eq!(bad, Err(VerifyError::NoMatch));
    }

    #[test]
    fn both_schemes_sign_and_verify_and_a_rotation_sends_both() {
        let signer = Signer::new(&[hmac_secret(1), ed_key(2)]).expect("signer");
        let body = br#"{"order_id":"o-1"}"#;
        let header = signer.sign("inv-1", NOW, body);
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2, "{header}");
        assert!(
            parts[0].starts_with("v1,") && parts[1].starts_with("v1a,"),
            "{header}"
        );
        let keys = signer.verifying_keys();
        assert!(keys[1].to_text().starts_with("whpk_"));
        // Each key alone accepts it: a receiver that trusts only the old or only the new key.
        for key in &keys {
            let parsed = VerifyingKey::parse(&key.to_text()).expect("round trip");
            assert_eq!(&parsed, key);
            let r = verify(
                &[parsed],
                Some("inv-1"),
                Some(&NOW.to_string()),
                Some(&header),
                body,
                NOW + 10,
                300,
            );
            assert_eq!(r, Ok(()));
        }
        // Another key, another body, another id, a stale timestamp: refused.
        let stranger = Signer::new(&[hmac_secret(9)])
            .expect("signer")
            .verifying_keys();
        let at = NOW.to_string();
        assert_eq!(
            verify(
                &stranger,
                Some("inv-1"),
                Some(&at),
                Some(&header),
                body,
                NOW,
                300
            ),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(
            verify(
                &keys,
                Some("inv-1"),
                Some(&at),
                Some(&header),
                b"{}",
                NOW,
                300
            ),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(
            verify(
                &keys,
                Some("inv-2"),
                Some(&at),
                Some(&header),
                body,
                NOW,
                300
            ),
            Err(VerifyError::NoMatch)
        );
        assert_eq!(
            verify(
                &keys,
                Some("inv-1"),
                Some(&at),
                Some(&header),
                body,
                NOW + 301,
                300
            ),
            Err(VerifyError::Timestamp(-301))
        );
        assert_eq!(
            verify(&keys, None, Some(&at), Some(&header), body, NOW, 300),
            Err(VerifyError::Header(HEADER_ID))
        );
        assert_eq!(
            verify(
                &keys,
                Some("inv-1"),
                Some("soon"),
                Some(&header),
                body,
                NOW,
                300
            ),
            Err(VerifyError::Header(HEADER_TIMESTAMP))
        );
        // A v1a signature is never checked as v1 (and the reverse).
        let swapped = header.replace("v1a,", "v1,");
        let ed_only = vec![keys[1].clone()];
        assert_eq!(
            verify(
                &ed_only,
                Some("inv-1"),
                Some(&at),
                Some(&swapped),
                body,
                NOW,
                300
            ),
            Err(VerifyError::NoMatch)
        );
    }

    #[test]
    fn bad_secrets_are_refused_without_showing_them() {
        let short = format!("whsec_{}", B64.encode([7u8; 8]));
        let e = Signer::new(&[hmac_secret(1), short.clone()]).expect_err("too short");
        assert_eq!(e.0, 1);
        assert!(!e.1.to_string().contains(&short[6..]), "{}", e.1);
        assert!(Signer::new(&["plain-secret"]).is_err());
        assert!(Signer::new::<&str>(&[]).is_err());
        assert!(Signer::new(&["whsk_!!!"]).is_err());
        assert!(
            VerifyingKey::parse(&ed_key(3)).is_err(),
            "receivers hold the public key"
        );
        let debug = format!("{:?}", SigningKey::parse(&hmac_secret(1)).expect("key"));
        assert!(debug.contains("redacted"), "{debug}");
    }
}
