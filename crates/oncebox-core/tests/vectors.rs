//! The known answers of `vectors/keys.json`, which the Python and TypeScript tests check too:
//! every language derives the same delivery keys and the same tool-call keys.

use std::time::{Duration, SystemTime};

use oncebox_core::CallIdentity;
use oncebox_core::delivery_key::{delivery_key, derived_key};
use serde_json::Value;

fn vectors(kind: &str) -> Vec<Value> {
    let doc: Value =
        serde_json::from_str(include_str!("../vectors/keys.json")).expect("vectors are JSON");
    let list = doc[kind].as_array().expect(kind).clone();
    assert!(!list.is_empty(), "no {kind} vectors");
    list
}

fn text<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("{field} in {v}"))
}

fn at(seconds: f64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs_f64(seconds)
}

#[test]
fn delivery_keys_match_the_vectors() {
    for v in vectors("delivery_key") {
        assert_eq!(
            delivery_key(text(&v, "tenant"), text(&v, "key")),
            text(&v, "delivery_key"),
            "{v}"
        );
    }
    for v in vectors("derived_key") {
        assert_eq!(
            derived_key(text(&v, "prefix"), text(&v, "delivery_key")),
            text(&v, "key"),
            "{v}"
        );
    }
}

#[test]
fn call_identities_match_the_vectors() {
    for v in vectors("call_identity") {
        let pointers: Option<Vec<&str>> = v["pointers"]
            .as_array()
            .map(|p| p.iter().filter_map(Value::as_str).collect());
        let window = Duration::from_secs(v["window"].as_u64().expect("window"));
        let identity = CallIdentity::of(
            text(&v, "tool"),
            &v["arguments"],
            pointers.as_deref(),
            window,
        )
        .expect("identifying arguments present");
        let now = at(v["at"].as_f64().expect("at"));
        let (current, previous) = identity.keys_at(now);
        assert_eq!(
            [current, previous],
            [&v["keys_at"][0], &v["keys_at"][1]].map(|k| k.as_str().expect("key").to_owned()),
            "{v}"
        );
        let created = v["previous_created"].as_f64().map(at);
        assert_eq!(identity.key_for(now, created), text(&v, "key"), "{v}");
    }
}
