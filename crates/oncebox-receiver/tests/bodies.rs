//! What the receiver keeps of each request, over a real socket.

use oncebox_receiver::{Receiver, ReceiverConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection of its own to `rx`, and the address it is at.
async fn connect(rx: &Receiver) -> (TcpStream, String) {
    let addr = rx
        .url()
        .trim_start_matches("http://")
        .replace("/effects", "");
    let stream = TcpStream::connect(&addr).await.expect("connect");
    (stream, addr)
}

/// One request on a connection of its own; the answer's body as JSON, or null when the
/// connection was closed without an answer.
async fn exchange(rx: &Receiver, head: &str, body: &str) -> Value {
    let (mut stream, addr) = connect(rx).await;
    let request = format!(
        "{head}\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    // The receiver keeps connections open: read the head, then Content-Length bytes.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).await.expect("answer");
        if n == 0 {
            assert!(answer.is_empty(), "the answer broke off");
            return Value::Null;
        }
        answer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&answer);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .and_then(|v| v.trim().parse().ok())
            .expect("a Content-Length");
        if body.len() >= length {
            return serde_json::from_str(&body[..length]).expect("a JSON answer");
        }
    }
}

async fn post(rx: &Receiver, key: &str, body: &str) -> Value {
    let head = format!("POST /effects HTTP/1.1\r\nIdempotency-Key: {key}");
    exchange(rx, &head, body).await
}

#[tokio::test]
async fn a_receiver_keeping_no_bodies_still_counts_replays_and_looks_up_every_effect() {
    for keep_no_bodies in [false, true] {
        let rx = Receiver::start(ReceiverConfig {
            honours_keys: true,
            keep_no_bodies,
            ..ReceiverConfig::default()
        })
        .await
        .expect("receiver");
        let first = post(&rx, "k-1", r#"{"n": 1}"#).await;
        let again = post(&rx, "k-1", r#"{"n": 1}"#).await;
        let doubled = post(&rx, "k-2", r#"{"n": 2, "faults": ["double"]}"#).await;
        assert!(doubled.is_null(), "a double effect goes unanswered");
        assert_eq!(first["replayed"], false);
        assert_eq!(again["replayed"], true, "the key is honoured");
        assert_eq!(rx.effects().get("k-1"), Some(&1));
        assert_eq!(rx.effects().get("k-2"), Some(&2));
        let seen = rx.seen();
        assert_eq!(seen.len(), 3, "every request is seen");
        let found = exchange(&rx, "GET /effects?key=k-2 HTTP/1.1", "").await;
        let ids: Vec<&Value> = found["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|e| &e["id"])
            .collect();
        assert_eq!(ids, ["ref-k-2", "ref-k-2-2"], "both effects are found");
        match keep_no_bodies {
            false => {
                assert_eq!(seen[0].body["n"], 1);
                assert_eq!(found["data"][0]["n"], 2);
            }
            true => {
                assert!(seen.iter().all(|s| s.body.is_null()), "no body is kept");
                assert_eq!(found["data"][0].as_object().map(|o| o.len()), Some(1));
            }
        }
    }
}

#[tokio::test]
async fn a_receiver_keeping_no_history_still_counts_scripts_faults_and_looks_up_every_effect() {
    let rx = Receiver::start(ReceiverConfig {
        keep_no_history: true,
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver");
    let script = r#"{"n": 1, "faults": ["503:1", "ok"]}"#;
    let refused = post(&rx, "k-1", script).await;
    let done = post(&rx, "k-1", script).await;
    assert_eq!(
        refused["error"], "busy",
        "the first request's fault: {refused}"
    );
    assert_eq!(done["id"], "ref-k-1", "the second request's: {done}");
    let doubled = post(&rx, "k-2", r#"{"n": 2, "faults": ["double"]}"#).await;
    assert!(doubled.is_null(), "a double effect goes unanswered");
    assert_eq!(rx.effects().get("k-1"), Some(&1));
    assert_eq!(rx.effects().get("k-2"), Some(&2));
    assert!(rx.seen().is_empty(), "no request is kept");
    let found = exchange(&rx, "GET /effects?key=k-2 HTTP/1.1", "").await;
    assert_eq!(
        found["data"][1]["id"], "ref-k-2-2",
        "both effects are found"
    );
    assert_eq!(found["data"][0]["n"], 2, "with their bodies");
}

#[tokio::test]
async fn a_receiver_keeping_no_bodies_reads_faults_however_the_body_spells_them() {
    let rx = Receiver::start(ReceiverConfig {
        keep_no_bodies: true,
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver");
    // "faults" spelt with a JSON escape is still the key "faults".
    let escaped = post(&rx, "k-1", r#"{"\u0066aults": ["double"]}"#).await;
    assert!(escaped.is_null(), "a double effect goes unanswered");
    assert_eq!(rx.effects().get("k-1"), Some(&2));
    // Neither a body naming no faults nor one that is not JSON is refused.
    assert_eq!(post(&rx, "k-2", r#"{"n": 2}"#).await["id"], "ref-k-2");
    assert_eq!(post(&rx, "k-3", "not json").await["id"], "ref-k-3");
    assert_eq!(rx.effects().get("k-3"), Some(&1));
}

#[tokio::test]
async fn an_answer_spells_any_key_as_json_and_a_request_may_arrive_in_pieces() {
    let rx = Receiver::start(ReceiverConfig::default())
        .await
        .expect("receiver");
    let key = r#"a"b\c%2F/.."#;
    assert_eq!(post(&rx, key, "{}").await["id"], format!("ref-{key}"));

    // The head and the body in separate writes, the length header in lower case.
    let (mut stream, _) = connect(&rx).await;
    let body = r#"{"n": 7, "faults": ["500"]}"#;
    let head = format!(
        "POST /effects HTTP/1.1\r\nidempotency-key: k-9\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.flush().await.expect("flush");
    tokio::task::yield_now().await;
    stream.write_all(body.as_bytes()).await.expect("body");
    let mut answer = Vec::new();
    while !String::from_utf8_lossy(&answer).contains("oops") {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await.expect("answer");
        assert_ne!(n, 0, "the answer broke off");
        answer.extend_from_slice(&chunk[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 500"), "the body's fault");
    assert_eq!(rx.effects().get("k-9"), Some(&1), "the effect happened");
    assert_eq!(rx.seen()[1].body["n"], 7, "the whole body was read");
}
