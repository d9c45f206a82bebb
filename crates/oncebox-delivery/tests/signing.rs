//! Signed HTTP deliveries against a server on 127.0.0.1 that keeps each request as received:
//! the Standard Webhooks headers verify with `oncebox_signing::webhook::verify` for every
//! configured key, a retry keeps its `webhook-id`, and an unusable secret is refused at start
//! naming its place in the list. (PyPI's `standardwebhooks` checks the same deliveries in
//! python/tests/test_signing.py.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use oncebox_core::config::{Config, Destination};
use oncebox_delivery::{DeliveryOutcome, DeliveryRequest, HttpDestination};
use oncebox_signing::webhook::{Signer, VerifyingKey, verify};
use serde_json::json;

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn record(State(seen): State<Seen>, headers: HeaderMap, body: Bytes) -> StatusCode {
    seen.lock().expect("lock").push((headers, body));
    StatusCode::CREATED
}

fn destination(url: &str, secrets: &[&str]) -> Result<HttpDestination, String> {
    let list = secrets
        .iter()
        .map(|s| format!("\"{s}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let config = Config::from_toml(&format!(
        "[actions.a]\ndestination = \"billing\"\n[destinations.billing]\nkind = \"http\"\n\
         url = \"{url}\"\nidempotency = \"key\"\nsigning = {{ secrets = [{list}] }}\n"
    ))
    .map_err(|e| e.to_string())?;
    let Destination::Http(h) = &config.destinations["billing"] else {
        return Err("not http".into());
    };
    HttpDestination::new("billing", h).map_err(|e| e.to_string())
}

const NEW: &str = "whsec_bm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm5ubm4=";
const OLD: &str = "whsec_b29vb29vb29vb29vb29vb29vb29vb29vb29vb29vb28=";
const ED: &str = "whsk_ZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWU=";

#[tokio::test]
async fn every_configured_key_signs_and_each_verifies_alone() {
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route("/in", axum::routing::post(record))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/in", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dest = destination(&url, &[NEW, OLD, ED]).expect("destination");
    let arguments = json!({"order_id": "o-1", "amount": "10.00"});
    for attempt in [1, 2] {
        let req = DeliveryRequest {
            tenant_id: "t",
            delivery_key: "inv.1",
            action: "a",
            attempt,
            request_hash: &"0".repeat(64),
            arguments: &arguments,
        };
        let outcome = dest.deliver(&req, Duration::from_secs(5)).await;
        assert!(
            matches!(outcome, DeliveryOutcome::Succeeded { .. }),
            "{outcome:?}"
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let keys = Signer::new(&[NEW, OLD, ED])
        .expect("signer")
        .verifying_keys();
    assert!(keys[2].to_text().starts_with("whpk_"));
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2);
    for (headers, body) in &seen {
        let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
        assert_eq!(h("webhook-id"), Some("inv.1"), "the key, on every attempt");
        assert_eq!(h("webhook-id"), h("idempotency-key"));
        assert_eq!(
            h("webhook-signature").map(|s| s.split(' ').count()),
            Some(3)
        );
        for key in &keys {
            let alone = [VerifyingKey::parse(&key.to_text()).expect("key")];
            let sig = h("webhook-signature");
            let at = h("webhook-timestamp");
            assert_eq!(
                verify(&alone, h("webhook-id"), at, sig, body, now, 300),
                Ok(()),
                "{key:?}"
            );
            let mut other = body.to_vec();
            other.push(b' ');
            assert!(verify(&alone, h("webhook-id"), at, sig, &other, now, 300).is_err());
        }
    }
}

#[test]
fn an_unusable_secret_is_refused_at_start_naming_its_place() {
    let short = "whsec_c2hvcnQ="; // "short": under 24 bytes
    let e = destination("http://127.0.0.1:9/in", &[NEW, short]).expect_err("refused");
    assert!(e.contains("destinations.billing.signing.secrets[1]"), "{e}");
    assert!(!e.contains("c2hvcnQ"), "the secret is not echoed: {e}");
    let e = destination("http://127.0.0.1:9/in", &["plain"]).expect_err("refused");
    assert!(e.contains("secrets[0]") && e.contains("whsec_"), "{e}");
}
