//! The client behaviour fixture (`tests/fixtures/client-behaviour.json`), run against a scripted
//! server: what the Python and TypeScript clients are held to as well.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use oncebox_client::{Client, ClientError, RetryConfig, Submit};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// One request as the scripted server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    target: String,
    key: Option<String>,
    body: Vec<u8>,
}

#[derive(Clone)]
struct Script {
    case: Arc<Value>,
    intent: Arc<Value>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Script {
    /// The answer to the request just seen (the nth, from 1), or `None` to drop it.
    fn answer(&self, n: usize) -> Option<Vec<u8>> {
        let answers = self.case["answers"].as_array().expect("answers");
        let answer = &answers[n.min(answers.len()) - 1];
        if answer["drop"] == json!(true) {
            return None;
        }
        let status = answer["status"].as_u64().expect("a status");
        let doc = if answer.get("intent").is_some() {
            let mut doc = (*self.intent).clone();
            doc["idempotency_key"] = self.case["call"]["key"].clone();
            for (k, v) in answer["intent"].as_object().expect("an object") {
                doc[k] = v.clone();
            }
            doc
        } else {
            let mut doc = answer["problem"].clone();
            doc["status"] = json!(status);
            doc
        };
        let body = doc.to_string();
        let mut head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        if let Some(headers) = answer.get("headers").and_then(Value::as_object) {
            for (name, value) in headers {
                head.push_str(&format!("{name}: {}\r\n", value.as_str().expect("text")));
            }
        }
        head.push_str("\r\n");
        Some([head.into_bytes(), body.into_bytes()].concat())
    }

    /// Serves one connection's requests until it closes or an answer is dropped.
    async fn connection(self, stream: TcpStream) {
        let mut stream = BufReader::new(stream);
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            let mut parts = line.split_whitespace();
            let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let (mut length, mut key) = (0usize, None);
            loop {
                let mut header = String::new();
                if stream.read_line(&mut header).await.unwrap_or(0) == 0 {
                    return;
                }
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                let (name, value) = header.split_once(':').unwrap_or((header, ""));
                match name.to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "idempotency-key" => key = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
            let mut body = vec![0; length];
            if stream.read_exact(&mut body).await.is_err() {
                return;
            }
            let n = {
                let mut seen = self.seen.lock().expect("lock");
                seen.push(Seen {
                    method: method.to_owned(),
                    target: target.to_owned(),
                    key,
                    body,
                });
                seen.len()
            };
            match self.answer(n) {
                None => return,
                Some(bytes) => {
                    if stream.get_mut().write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// What a call returned: the intent's status and whether a submit created it, or the error.
async fn run(client: &Client, call: &Value) -> Result<(String, Option<bool>), ClientError> {
    let key = call["key"].as_str().expect("a key");
    let (intent, created) = match call["op"].as_str().expect("an op") {
        "submit" => {
            let request = Submit::new(
                call["action"].as_str().expect("an action"),
                call["arguments"].clone(),
            );
            let submitted = client.submit(key, &request).await?;
            (submitted.intent, Some(submitted.created))
        }
        "get" => (client.get(key).await?, None),
        "cancel" => (client.cancel(key).await?, None),
        "wait" => {
            let secs = call["timeout_s"].as_u64().expect("timeout_s");
            (client.wait(key, Duration::from_secs(secs)).await?, None)
        }
        other => panic!("no such op {other}"),
    };
    Ok((intent.status.to_string(), created))
}

/// Checks that `error` is of the kind the fixture expects, with its status and field.
fn check_error(name: &str, error: &ClientError, want: &Value) {
    let (kind, status, field) = match error {
        ClientError::Api(p) => ("ApiError", Some(u64::from(p.status)), p.field.clone()),
        ClientError::Transport { .. } => ("TransportError", None, None),
        ClientError::Invalid { field, .. } => ("InvalidIntent", None, Some((*field).to_owned())),
        ClientError::Unexpected { .. } => ("Unexpected", None, None),
    };
    assert_eq!(kind, want["kind"], "{name}: {error}");
    if let Some(s) = want["status"].as_u64() {
        assert_eq!(status, Some(s), "{name}: {error}");
    }
    if let Some(f) = want["field"].as_str() {
        assert_eq!(field.as_deref(), Some(f), "{name}: {error}");
    }
}

async fn case(intent: Arc<Value>, case: Value) {
    let name = case["name"].as_str().expect("a name").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let script = Script {
        case: Arc::new(case.clone()),
        intent,
        seen: Arc::default(),
    };
    let server = {
        let script = script.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(script.clone().connection(stream));
            }
        })
    };
    let retry = &case["retry"];
    let ms = |v: &Value| Duration::from_millis(v.as_u64().expect("milliseconds"));
    let client = Client::new(&url, "token")
        .expect("a client")
        .with_timeout(Duration::from_secs(5))
        .with_retry(RetryConfig {
            max_attempts: usize::try_from(retry["attempts"].as_u64().expect("attempts"))
                .expect("attempts"),
            min_delay: ms(&retry["min_delay_ms"]),
            max_delay: ms(&retry["max_delay_ms"]),
        });
    let expect = &case["expect"];
    let started = Instant::now();
    match (run(&client, &case["call"]).await, expect.get("error")) {
        (Err(e), Some(want)) => check_error(&name, &e, want),
        (Ok((status, created)), None) => {
            assert_eq!(status, expect["status"], "{name}");
            if let Some(c) = expect["created"].as_bool() {
                assert_eq!(created, Some(c), "{name}");
            }
        }
        (got, want) => panic!("{name}: got {got:?}, expected {want:?}"),
    }
    let elapsed = started.elapsed();
    server.abort();
    let seen = script.seen.lock().expect("lock").clone();
    let targets: Vec<&str> = seen.iter().map(|s| s.target.as_str()).collect();
    assert_eq!(
        seen.len() as u64,
        expect["requests"].as_u64().expect("requests"),
        "{name}: {targets:?}"
    );
    if let Some(paths) = expect["paths"].as_array().filter(|p| !p.is_empty()) {
        for (n, request) in seen.iter().enumerate() {
            let want = paths[n.min(paths.len() - 1)].as_str().expect("a path");
            let path = request.target.split('?').next().unwrap_or("");
            assert_eq!(format!("{} {path}", request.method), want, "{name}");
        }
    }
    if expect["same_key_and_body"] == json!(true) {
        let first = &seen[0];
        assert!(
            seen.iter()
                .all(|s| s.key == first.key && s.body == first.body),
            "{name}"
        );
        let key = case["call"]["key"].as_str().expect("a key");
        assert_eq!(first.key.as_deref(), Some(format!("\"{key}\"").as_str()));
    }
    if let Some(waits) = expect["waits"].as_array() {
        let asked: Vec<Value> = seen
            .iter()
            .map(|s| {
                let query = s.target.split_once("?wait=").map_or("", |(_, w)| w);
                json!(query.parse::<u64>().expect("a wait"))
            })
            .collect();
        assert_eq!(&asked, waits, "{name}");
    }
    let least = expect["min_elapsed_ms"].as_u64().unwrap_or(0);
    assert!(
        elapsed >= Duration::from_millis(least),
        "{name}: {elapsed:?}"
    );
}

#[tokio::test]
async fn the_client_behaves_as_the_fixture_says() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/client-behaviour.json"
    ))
    .expect("the fixture");
    let fixture: Value = serde_json::from_str(&text).expect("JSON");
    let intent = Arc::new(fixture["intent"].clone());
    let cases = fixture["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10);
    for c in cases {
        case(intent.clone(), c.clone()).await;
    }
}
