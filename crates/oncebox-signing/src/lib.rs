//! Signing for oncebox, in one place and with one implementation (ring's):
//!
//! - [`hmac_sha256`], the keyed hash of `hash` redaction (`oncebox-core`);
//! - [`webhook`], Standard Webhooks signatures: what oncebox's HTTP destinations sign requests
//!   with (`oncebox-delivery`) and what a receiver in Rust verifies them with (re-exported as
//!   `oncebox_inbox::webhook`).
//!
//! It depends on no other oncebox crate, so that the producer of a signature and its consumer
//! both depend on it rather than on each other.

pub mod webhook;

/// HMAC-SHA256 of `message` under `key` (a key of any length, as RFC 2104 allows).
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let tag = ring::hmac::sign(&key, message);
    let mut out = [0; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // Test cases 1, 2 and 6 (a key longer than the block size).
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }
}
