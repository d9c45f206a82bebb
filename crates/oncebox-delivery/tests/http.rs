//! The HTTP adapter against a real receiver on 127.0.0.1: every answer class, every fault.

use std::time::Duration;

use oncebox_core::config::{Config, Destination};
use oncebox_core::outcome::ErrorCode;
use oncebox_core::retry::RetryAfter;
use oncebox_delivery::{DeliveryOutcome, DeliveryRequest, HttpDestination};
use oncebox_receiver::{Receiver, ReceiverConfig};
use serde_json::{Value, json};

fn destination(url: &str, extra: &str) -> HttpDestination {
    let text = format!(
        "[destinations.r]\nkind = \"http\"\nurl = \"{url}\"\nidempotency = \"key\"\ntimeout = \"2s\"\n{extra}"
    );
    let config = Config::from_toml(&text).expect("config");
    let Destination::Http(http) = &config.destinations["r"] else {
        panic!("an HTTP destination");
    };
    HttpDestination::new("r", http).expect("destination")
}

async fn send(dest: &HttpDestination, key: &str, arguments: Value) -> DeliveryOutcome {
    let req = DeliveryRequest {
        tenant_id: "t1",
        delivery_key: key,
        action: "create_invoice",
        attempt: 1,
        request_hash: "h",
        arguments: &arguments,
    };
    dest.deliver(&req, Duration::from_secs(30)).await
}

fn code(o: &DeliveryOutcome) -> Option<ErrorCode> {
    o.error().map(|e| e.code)
}

#[tokio::test]
async fn success_carries_the_key_and_the_reference() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let dest = destination(&rx.url(), "reference_pointer = \"/id\"");
    let o = send(&dest, "k-1", json!({"order": 1})).await;
    match o {
        DeliveryOutcome::Succeeded {
            status_code,
            external_reference,
            response,
        } => {
            assert_eq!(status_code, Some(201));
            assert_eq!(external_reference.as_deref(), Some("ref-k-1"));
            assert_eq!(response.expect("body")["id"], "ref-k-1");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rx.effects().get("k-1"), Some(&1));
    assert_eq!(rx.seen()[0].attempt, Some(1));
}

#[tokio::test]
async fn dropped_after_executing_is_unknown() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let dest = destination(&rx.url(), "");
    let o = send(&dest, "k", json!({"faults": ["drop"]})).await;
    assert!(matches!(o, DeliveryOutcome::Unknown { .. }), "{o:?}");
    assert_eq!(rx.effects().get("k"), Some(&1), "the effect happened");
}

#[tokio::test]
async fn an_answer_after_the_timeout_is_unknown() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let dest = destination(&rx.url(), "");
    let req_args = json!({"faults": ["slow:1500"]});
    let req = DeliveryRequest {
        tenant_id: "t1",
        delivery_key: "slow",
        action: "a",
        attempt: 1,
        request_hash: "h",
        arguments: &req_args,
    };
    let o = dest.deliver(&req, Duration::from_millis(300)).await;
    assert_eq!(code(&o), Some(ErrorCode::Timeout), "{o:?}");
    assert!(matches!(o, DeliveryOutcome::Unknown { .. }));
}

#[tokio::test]
async fn busy_answers_retry_with_retry_after_and_execute_nothing() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let dest = destination(&rx.url(), "");
    for (fault, status) in [("503:7", 503), ("429:3", 429)] {
        let o = send(&dest, fault, json!({"faults": [fault]})).await;
        match o {
            DeliveryOutcome::RetryBeforeExecution { error, retry_after } => {
                assert_eq!(error.status_code, Some(status));
                let secs = fault
                    .split(':')
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .expect("secs");
                assert_eq!(
                    retry_after,
                    Some(RetryAfter::Delay(Duration::from_secs(secs)))
                );
            }
            other => panic!("{fault}: {other:?}"),
        }
    }
    assert_eq!(rx.total_effects(), 0);
}

#[tokio::test]
async fn refusals_are_permanent_and_500_is_unknown() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let dest = destination(&rx.url(), "");
    for status in ["400", "409", "422"] {
        let o = send(&dest, status, json!({"faults": [status]})).await;
        assert!(
            matches!(o, DeliveryOutcome::Permanent { .. }),
            "{status}: {o:?}"
        );
    }
    let o = send(&dest, "500", json!({"faults": ["500"]})).await;
    assert!(matches!(o, DeliveryOutcome::Unknown { .. }), "{o:?}");
    let overridden = destination(&rx.url(), "permanent_statuses = [500]");
    let o = send(&overridden, "500b", json!({"faults": ["500"]})).await;
    assert!(matches!(o, DeliveryOutcome::Permanent { .. }), "{o:?}");
}

#[tokio::test]
async fn event_streams_must_end_with_their_completion_event() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let dest = destination(
        &rx.url(),
        "completion_event = \"done\"\nreference_pointer = \"/id\"",
    );
    let o = send(&dest, "stream-ok", json!({"faults": ["sse"]})).await;
    match o {
        DeliveryOutcome::Succeeded {
            external_reference, ..
        } => {
            assert_eq!(external_reference.as_deref(), Some("ref-stream-ok"));
        }
        other => panic!("{other:?}"),
    }
    let o = send(&dest, "stream-cut", json!({"faults": ["sse_cut"]})).await;
    assert_eq!(code(&o), Some(ErrorCode::StreamIncomplete), "{o:?}");
    assert!(matches!(o, DeliveryOutcome::Unknown { .. }));
}

#[tokio::test]
async fn a_missing_reference_is_unknown() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let dest = destination(&rx.url(), "reference_pointer = \"/invoice/number\"");
    let o = send(&dest, "k", json!({})).await;
    assert_eq!(code(&o), Some(ErrorCode::MalformedResponse), "{o:?}");
}

#[tokio::test]
async fn a_refused_connection_is_retried_before_execution() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let dest = destination(&format!("http://127.0.0.1:{port}/x"), "");
    let o = send(&dest, "k", json!({})).await;
    assert_eq!(code(&o), Some(ErrorCode::ConnectRefused), "{o:?}");
    assert!(matches!(o, DeliveryOutcome::RetryBeforeExecution { .. }));
}

#[tokio::test]
async fn a_key_honouring_receiver_replays_instead_of_executing_again() {
    let rx = Receiver::start(ReceiverConfig {
        honours_keys: true,
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver");
    let dest = destination(&rx.url(), "reference_pointer = \"/id\"");
    let first = send(&dest, "k", json!({"faults": ["drop"]})).await;
    assert!(matches!(first, DeliveryOutcome::Unknown { .. }));
    let again = send(&dest, "k", json!({"faults": ["drop"]})).await;
    assert!(
        matches!(again, DeliveryOutcome::Succeeded { .. }),
        "{again:?}"
    );
    assert_eq!(rx.effects().get("k"), Some(&1), "one effect for two sends");
}

/// Failures before the request can have left are retried before execution, each named: a name
/// that does not resolve is `dns`, a server that answers a TLS hello with something else `tls`.
#[tokio::test]
async fn a_name_that_does_not_resolve_or_a_server_without_tls_is_retried_before_execution() {
    let dest = destination("http://no-such-host.invalid/x", "");
    let o = send(&dest, "k", json!({})).await;
    assert_eq!(code(&o), Some(ErrorCode::Dns), "{o:?}");
    assert!(matches!(o, DeliveryOutcome::RetryBeforeExecution { .. }));

    // A plain-text server on an https:// URL: it answers the hello with an HTTP error.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut hello = [0u8; 512];
            let _ = stream.read(&mut hello).await;
            let _ = stream
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let dest = destination(&format!("https://127.0.0.1:{port}/x"), "");
    let o = send(&dest, "k", json!({})).await;
    assert_eq!(code(&o), Some(ErrorCode::Tls), "{o:?}");
    assert!(matches!(o, DeliveryOutcome::RetryBeforeExecution { .. }));
    let detail = &o.error().expect("an error").detail;
    assert!(
        detail.starts_with(&format!("POST https://127.0.0.1:{port}/x: ")),
        "{detail}"
    );
}
