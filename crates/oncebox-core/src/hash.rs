//! RFC 8785 (JCS) canonical JSON and the request hash.
//!
//! The request hash identifies *what* an intent asks for, independent of how its JSON was
//! written: key order, whitespace and number spelling (`1E30`, `1e+30`, `1000…0`) do not change
//! it; any changed value does. It never includes the attempt number, time or transport ids.
//!
//! # Precision
//! JCS serialises numbers as IEEE-754 doubles (RFC 8785 §3.2.2.3), so beyond 2^53
//! (9,007,199,254,740,992) not every integer exists: `9007199254740993` and `9007199254740992`
//! hash the same, and so do `7e20` and `700000000000000000001`. Large identifiers and exact
//! money amounts must travel as strings. [`find_unsafe_number`] finds any number beyond ±2^53,
//! however it is written, so that intake refuses it instead of silently rounding.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Largest integer that an IEEE-754 double represents exactly: 2^53.
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;

/// The RFC 8785 canonical form of `value`.
pub fn canonical_json(value: &Value) -> String {
    // A `Value` always has string keys and finite numbers, the only inputs JCS refuses.
    serde_json_canonicalizer::to_string(value)
        .expect("a serde_json::Value is always canonicalizable")
}

/// Lowercase hex SHA-256 of the JCS form of `{"action": action, "arguments": arguments}`.
pub fn request_hash(action: &str, arguments: &Value) -> String {
    let doc = json!({ "action": action, "arguments": arguments });
    hex::encode(Sha256::digest(canonical_json(&doc).as_bytes()))
}

/// The request hash of an intent some of whose fields were dropped by redaction: lowercase hex
/// SHA-256 of the JCS form of `{"action": action, "arguments": arguments, "dropped": dropped}`,
/// where `dropped` is the keyed digest of the values removed
/// ([`crate::redact::apply_and_digest`]). [`request_hash`] when nothing was dropped.
pub fn request_hash_dropping(action: &str, arguments: &Value, dropped: Option<&str>) -> String {
    let Some(dropped) = dropped else {
        return request_hash(action, arguments);
    };
    let doc = json!({ "action": action, "arguments": arguments, "dropped": dropped });
    hex::encode(Sha256::digest(canonical_json(&doc).as_bytes()))
}

/// The JSON pointer (RFC 6901) of the first number in `value` whose magnitude exceeds 2^53 —
/// an integer JCS would round, or a float (`7e20`, which JCS writes as the integer
/// `700000000000000000000`) beyond the range where doubles hold every integer; `None` when
/// every number is within it. A `Value` holds integers beyond the 64-bit range as floats, so
/// this one check covers them too.
pub fn find_unsafe_number(value: &Value) -> Option<String> {
    find_pointer(value, &|v, _| match v {
        Value::Number(n) => {
            n.as_u64().is_some_and(|u| u > MAX_SAFE_INTEGER)
                || n.as_i64()
                    .is_some_and(|i| i.unsigned_abs() > MAX_SAFE_INTEGER)
                || (n.is_f64()
                    && n.as_f64()
                        .is_some_and(|f| f.abs() > MAX_SAFE_INTEGER as f64))
        }
        _ => false,
    })
}

/// The JSON pointer of the first string or member name in `value` holding U+0000, which
/// Postgres cannot store (in `jsonb` or `text`); `None` when there is none.
pub fn find_nul(value: &Value) -> Option<String> {
    find_pointer(value, &|v, name| {
        name.is_some_and(|n| n.contains('\0')) || v.as_str().is_some_and(|s| s.contains('\0'))
    })
}

/// The pointer of the first value (with the member name it is under, if any) that `hit`
/// accepts, depth first.
fn find_pointer(value: &Value, hit: &dyn Fn(&Value, Option<&str>) -> bool) -> Option<String> {
    fn walk(
        value: &Value,
        name: Option<&str>,
        path: &mut String,
        hit: &dyn Fn(&Value, Option<&str>) -> bool,
    ) -> bool {
        if hit(value, name) {
            return true;
        }
        let mut step = |segment: &str, item: &Value, name: Option<&str>| {
            let len = path.len();
            path.push('/');
            path.push_str(&segment.replace('~', "~0").replace('/', "~1"));
            let found = walk(item, name, path, hit);
            if !found {
                path.truncate(len);
            }
            found
        };
        match value {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .any(|(i, item)| step(&i.to_string(), item, None)),
            Value::Object(map) => map.iter().any(|(k, item)| step(k, item, Some(k))),
            _ => false,
        }
    }
    let mut path = String::new();
    walk(value, None, &mut path, hit).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn nul_is_found_in_values_and_member_names() {
        assert_eq!(
            find_nul(&json!({"a": ["x", "y\u{0}"]})),
            Some("/a/1".into())
        );
        assert_eq!(
            find_nul(&json!({"a/b": {"k\u{0}": 1}})),
            Some("/a~1b/k\u{0}".into())
        );
        assert_eq!(find_nul(&json!({"a": "fine", "b": [1, null]})), None);
        assert_eq!(
            find_unsafe_number(&json!({"a": [1, 9007199254740993_u64]})),
            Some("/a/1".into())
        );
    }

    fn jcs(text: &str) -> String {
        canonical_json(&serde_json::from_str(text).expect("test JSON parses"))
    }

    #[test]
    fn rfc8785_section_3_2_2_example() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        assert_eq!(
            jcs(input),
            "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
             \"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"
        );
    }

    #[test]
    fn rfc8785_appendix_b_numbers() {
        // (IEEE-754 bits, expected JCS text) from RFC 8785 Appendix B.
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x444b1ae4d6e2ef51, "1.0000000000000001e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for &(bits, want) in cases {
            let n = serde_json::Number::from_f64(f64::from_bits(bits)).expect("finite");
            assert_eq!(canonical_json(&Value::Number(n)), want, "bits {bits:#018x}");
        }
    }

    #[test]
    fn number_spellings_from_text() {
        assert_eq!(jcs("1e-6"), "0.000001");
        assert_eq!(jcs("1E-7"), "1e-7");
        assert_eq!(jcs("-0"), "0");
        assert_eq!(jcs("-0.0"), "0");
        assert_eq!(jcs("1E30"), "1e+30");
        assert_eq!(jcs("1e21"), "1e+21");
        assert_eq!(jcs("1e20"), "100000000000000000000");
        assert_eq!(jcs("4.50"), "4.5");
        assert_eq!(jcs("1e308"), "1e+308");
        assert_eq!(jcs("2.5e-320"), "2.5e-320");
        assert_eq!(jcs("[10, 1.0, 0.1]"), "[10,1,0.1]");
    }

    #[test]
    fn integers_beyond_2_pow_53_are_rounded_and_detected() {
        assert_eq!(
            request_hash(
                "a",
                &serde_json::from_str("{\"n\":9007199254740993}").expect("json")
            ),
            request_hash(
                "a",
                &serde_json::from_str("{\"n\":9007199254740992}").expect("json")
            ),
            "JCS compares numbers as doubles: this is why large ids must be strings"
        );
        let v: Value = serde_json::from_str(
            r#"{"ok": 9007199254740992, "x": [1, {"a/b": -9007199254740993}]}"#,
        )
        .expect("json");
        assert_eq!(find_unsafe_number(&v).as_deref(), Some("/x/1/a~1b"));
        assert_eq!(
            find_unsafe_number(&json!({"id": "9007199254740993", "n": 1.5e-300, "m": 2.5e15})),
            None
        );
        // Floats beyond 2^53 too: JCS writes 7e20 as an integer, and its neighbours alike.
        assert_eq!(
            find_unsafe_number(&json!({"f": 7e20})).as_deref(),
            Some("/f")
        );
        assert_eq!(
            find_unsafe_number(&json!([-1.5e300])).as_deref(),
            Some("/0")
        );
        assert_eq!(find_unsafe_number(&json!(9007199254740992.0)), None);
        assert_eq!(find_unsafe_number(&json!(u64::MAX)).as_deref(), Some(""));
    }

    #[test]
    fn rfc8785_section_3_2_3_key_order_by_utf16_code_units() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let out = jcs(input);
        let order: Vec<&str> = [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small Letter O With Diaeresis",
            "Euro Sign",
            "Emoji: Grinning Face",
            "Hebrew Letter Dalet With Dagesh",
        ]
        .to_vec();
        let positions: Vec<usize> = order
            .iter()
            .map(|v| out.find(v).expect("value present"))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{out}");
        // U+1F600 (surrogates D83D DE00) sorts before U+FB33 by UTF-16, after it by code point.
        assert!(out.find('\u{1F600}') < out.find('\u{FB33}'));
    }

    #[test]
    fn request_hash_known_answer() {
        // printf '%s' '{"action":"create_invoice","arguments":{"amount":"12500.00","order_id":"order-8172"}}' | sha256sum
        assert_eq!(
            request_hash(
                "create_invoice",
                &json!({"order_id": "order-8172", "amount": "12500.00"})
            ),
            "e06c55b04e2fd1efa0a73bf5546202f7238dd9e992e089fa9389ddab3489985f"
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(1i64 << 53)..(1i64 << 53)).prop_map(|i| json!(i)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "\\PC{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Writes `value` as JSON text with object keys in a permuted order and random whitespace.
    fn scramble(value: &Value, seed: &mut u64, out: &mut String) {
        fn next(seed: &mut u64) -> u64 {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        }
        let ws = |seed: &mut u64, out: &mut String| {
            out.push_str([" ", "", "\n  ", "\t", ""][(next(seed) % 5) as usize]);
        };
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                for i in (1..entries.len()).rev() {
                    entries.swap(i, (next(seed) % (i as u64 + 1)) as usize);
                }
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(seed, out);
                    out.push_str(&serde_json::to_string(k).expect("string"));
                    ws(seed, out);
                    out.push(':');
                    ws(seed, out);
                    scramble(v, seed, out);
                }
                ws(seed, out);
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(seed, out);
                    scramble(v, seed, out);
                }
                out.push(']');
            }
            other => out.push_str(&serde_json::to_string(other).expect("scalar")),
        }
    }

    /// Changes one leaf of `value` (chosen by `pick`); returns false when there is no leaf.
    fn mutate(value: &mut Value, pick: &mut usize) -> bool {
        match value {
            Value::Object(map) => map.values_mut().any(|v| mutate(v, pick)),
            Value::Array(items) => items.iter_mut().any(|v| mutate(v, pick)),
            leaf => {
                if *pick > 0 {
                    *pick -= 1;
                    return false;
                }
                *leaf = match leaf.take() {
                    Value::Null => json!(false),
                    Value::Bool(b) => json!(!b),
                    Value::String(s) => Value::String(s + "x"),
                    Value::Number(n) => match n.as_i64() {
                        Some(i) => json!(if i == 0 { 1 } else { -i }),
                        None => json!(n.as_f64().unwrap_or(0.0) + 1.0),
                    },
                    other => other,
                };
                true
            }
        }
    }

    /// `value` serialised with every object's members in an order drawn from `seed`: a
    /// `serde_json::Value` always iterates its members sorted, so this is how a permutation
    /// reaches the canonicaliser at all.
    struct Permuted<'a>(&'a Value, u64);

    impl serde::Serialize for Permuted<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::{SerializeMap, SerializeSeq};
            let mut seed = self.1;
            let mut next = move || {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed
            };
            match self.0 {
                Value::Object(map) => {
                    let mut entries: Vec<_> = map.iter().collect();
                    for i in (1..entries.len()).rev() {
                        entries.swap(i, (next() % (i as u64 + 1)) as usize);
                    }
                    let mut m = s.serialize_map(Some(entries.len()))?;
                    for (k, v) in entries {
                        m.serialize_entry(k, &Permuted(v, next()))?;
                    }
                    m.end()
                }
                Value::Array(items) => {
                    let mut q = s.serialize_seq(Some(items.len()))?;
                    for v in items {
                        q.serialize_element(&Permuted(v, next()))?;
                    }
                    q.end()
                }
                other => other.serialize(s),
            }
        }
    }

    /// The request hash computed from a permuted serialisation of the arguments.
    fn permuted_hash(action: &str, arguments: &Value, seed: u64) -> String {
        #[derive(serde::Serialize)]
        struct Doc<'a> {
            action: &'a str,
            arguments: Permuted<'a>,
        }
        let text = serde_json_canonicalizer::to_string(&Doc {
            action,
            arguments: Permuted(arguments, seed),
        })
        .expect("canonical");
        hex::encode(Sha256::digest(text.as_bytes()))
    }

    #[test]
    fn a_permutation_really_is_one_and_still_hashes_the_same() {
        let v = json!({"a": 1, "b": {"x": [1, {"q": 2, "p": 3}], "w": null}, "c": "z", "d": true});
        let sorted = serde_json::to_string(&v).expect("json");
        let permuted = (1..50u64)
            .map(|seed| {
                (
                    seed,
                    serde_json::to_string(&Permuted(&v, seed)).expect("json"),
                )
            })
            .find(|(_, text)| *text != sorted)
            .expect("some seed permutes the members");
        assert_eq!(
            permuted_hash("act", &v, permuted.0),
            request_hash("act", &v),
            "{} hashes as {sorted}",
            permuted.1
        );
    }

    proptest! {
        #[test]
        fn permuted_keys_and_whitespace_hash_the_same(v in arb_json(), seed in 1u64..) {
            // Members in another order: the canonical form sorts them.
            prop_assert_eq!(permuted_hash("act", &v, seed), request_hash("act", &v));
            // Other whitespace and member order in the text, read back.
            let mut seed = seed;
            let mut text = String::new();
            scramble(&v, &mut seed, &mut text);
            let reparsed: Value = serde_json::from_str(&text).expect("scrambled JSON parses");
            prop_assert_eq!(request_hash("act", &reparsed), request_hash("act", &v));
        }

        #[test]
        fn any_changed_value_changes_the_hash(v in arb_json(), pick in 0usize..64) {
            let mut changed = v.clone();
            let mut pick = pick;
            // Walk until a leaf is hit; if `pick` ran past every leaf, change the first one.
            if !mutate(&mut changed, &mut pick) {
                let mut first = 0;
                prop_assume!(mutate(&mut changed, &mut first));
            }
            prop_assume!(changed != v);
            prop_assert_ne!(request_hash("act", &changed), request_hash("act", &v));
        }

        #[test]
        fn action_is_part_of_the_hash(v in arb_json()) {
            prop_assert_ne!(request_hash("a", &v), request_hash("b", &v));
        }
    }
}
