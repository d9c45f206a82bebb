//! Delivery keys: the identity of an intent as every destination sees it.
//!
//! An idempotency key is unique per tenant; one destination credential serves every tenant. A
//! receiver that honours keys (as Stripe does, per credential) therefore needs a key that is
//! unique across tenants, or two tenants' intents under one key would become one effect, and
//! the second tenant would be answered with the first one's object. The delivery key is that
//! key: derived from (tenant, key), fixed when the intent is written ([`KeyForm`] is stored
//! with the intent), the same for every attempt, worker, operator retry, restart and upgrade,
//! and at most [`MAX_KEY_LEN`] bytes of printable ASCII, so it fits wherever a key did.
//!
//! The form is documented for receivers and consumers that want to compute it
//! (docs/receivers.md):
//!
//! - `TENANT:KEY` when the tenant holds no `:` and the whole fits in 255 bytes. It cannot be
//!   anything else's delivery key: the first `:` ends the tenant.
//! - otherwise `:sha256:` followed by the lowercase hex SHA-256 of the tenant, a zero byte and
//!   the key. No readable form starts with `:` (a tenant is never empty), and neither a
//!   tenant nor a key holds a zero byte, so the digest's input is unambiguous too.
//!
//! A delivery key is never `.` or `..`, so it can always be put into a URL path.

use sha2::{Digest, Sha256};

use crate::key::MAX_KEY_LEN;

/// How an intent's delivery key is formed, fixed when the intent is written. Stored with the
/// intent (`oncebox.intents.key_form`, a `smallint`): an intent keeps the form it was written
/// with, so an upgrade never changes the key of an intent already on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "sqlx", derive(sqlx::Type))]
#[serde(rename_all = "snake_case")]
#[repr(i16)]
pub enum KeyForm {
    /// The bare idempotency key, as every intent written before delivery keys carried the
    /// tenant was sent (and as writers of that release still write them): a re-send carries
    /// the bytes the first attempt carried.
    Bare = 0,
    /// The tenant-scoped form ([`delivery_key`]), unique across tenants. Every intent written
    /// by this release has it.
    Tenant = 1,
}

impl KeyForm {
    /// The form this release writes.
    pub const CURRENT: KeyForm = KeyForm::Tenant;

    /// The delivery key of `tenant`'s intent `key` in this form.
    pub fn delivery_key(self, tenant: &str, key: &str) -> String {
        match self {
            KeyForm::Bare => key.to_owned(),
            KeyForm::Tenant => delivery_key(tenant, key),
        }
    }
}

/// The prefix of the digest form.
pub const DIGEST_PREFIX: &str = ":sha256:";

/// The tenant-scoped delivery key of `tenant`'s intent `key` (see the module's documentation):
/// `TENANT:KEY` when that is unambiguous and fits, else `:sha256:` and a digest of both.
pub fn delivery_key(tenant: &str, key: &str) -> String {
    if !tenant.contains(':') && tenant.len() + 1 + key.len() <= MAX_KEY_LEN {
        return format!("{tenant}:{key}");
    }
    let mut h = Sha256::new();
    h.update(tenant.as_bytes());
    h.update([0u8]);
    h.update(key.as_bytes());
    format!("{DIGEST_PREFIX}{}", hex::encode(h.finalize()))
}

/// The key of a message oncebox sends about an intent rather than for it (`dlq`: a dead
/// letter; `approval`: an "approval requested" notice): `PREFIX:DELIVERY_KEY`, or, when that
/// would pass [`MAX_KEY_LEN`], the prefix and the digest form of the delivery key (an AMQP
/// `message_id` holds at most 255 bytes). Unique across tenants because the delivery key is.
pub fn derived_key(prefix: &str, delivery_key: &str) -> String {
    if prefix.len() + 1 + delivery_key.len() <= MAX_KEY_LEN {
        return format!("{prefix}:{delivery_key}");
    }
    let digest = hex::encode(Sha256::digest(delivery_key.as_bytes()));
    format!("{prefix}{DIGEST_PREFIX}{digest}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::validate_key;

    /// Known answers: every language's tests check the same vectors.
    #[test]
    fn known_answers() {
        assert_eq!(delivery_key("acme", "invoice-o-1"), "acme:invoice-o-1");
        assert_eq!(delivery_key("a", "b:c"), "a:b:c");
        assert_eq!(
            delivery_key("a:b", "c"),
            ":sha256:f1bb0ca6c7ffab359b80aba12b97054db77fc18693cdc3cd2b0b58afc2a6ebb3"
        );
        let long = "k".repeat(255);
        assert_eq!(
            delivery_key("acme", &long),
            ":sha256:36ff7c8003d7d07ded5e2d15e11627ec3dd7660bfc88db34b2e59a0930d6f9b3"
        );
    }

    #[test]
    fn two_tenants_never_share_a_delivery_key() {
        let tenants = ["a", "a:b", "ab", "b", ":", "t", "t:"];
        let keys = ["b", "b:c", "c", ":c", "x", ".", ".."];
        let mut seen = std::collections::HashMap::new();
        for t in tenants {
            for k in keys {
                let d = delivery_key(t, k);
                if let Some(prev) = seen.insert(d.clone(), (t, k)) {
                    panic!("{prev:?} and {:?} share {d}", (t, k));
                }
            }
        }
        // A readable key can never look like a digest, even for the tenant and key that spell one.
        let forged = delivery_key(":sha256", "00");
        assert!(forged.starts_with(DIGEST_PREFIX));
        assert_ne!(forged, ":sha256:00");
    }

    #[test]
    fn delivery_keys_are_valid_keys_of_at_most_255_bytes() {
        let t128 = "t".repeat(128);
        let k255 = "k".repeat(255);
        for (t, k) in [
            ("a", "."),
            ("a", ".."),
            (t128.as_str(), k255.as_str()),
            ("a", "%2e"),
        ] {
            let d = delivery_key(t, k);
            assert!(d.len() <= MAX_KEY_LEN, "{d}");
            validate_key(&d).expect(&d);
            for prefix in ["dlq", "approval"] {
                let derived = derived_key(prefix, &d);
                assert!(derived.len() <= MAX_KEY_LEN, "{derived}");
                validate_key(&derived).expect(&derived);
            }
        }
    }

    #[test]
    fn the_bare_form_is_the_key() {
        assert_eq!(KeyForm::Bare.delivery_key("acme", "k-1"), "k-1");
        assert_eq!(KeyForm::Tenant.delivery_key("acme", "k-1"), "acme:k-1");
        assert_eq!(KeyForm::CURRENT, KeyForm::Tenant);
    }
}
