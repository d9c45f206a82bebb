//! A reference receiver: an HTTP/1.1 endpoint on 127.0.0.1 that executes "effects" and counts
//! them per idempotency key, so that tests and the demo can prove one effect per intent.
//!
//! It speaks just enough HTTP (request line, headers, `Content-Length` body, keep-alive) to be
//! in full control of the connection: a fault can execute the effect and then close the socket
//! without a byte of answer, which a framework would not allow.
//!
//! # Faults
//! Per request, the receiver picks a [`Fault`]: from the body's `"faults"` list (index = how
//! many requests it has seen for that key; beyond the list, `ok`), else, when `drop_rate` is
//! set, a seeded draw drops that fraction of answers after executing.
//!
//! | fault | executes? | answer |
//! |---|---|---|
//! | `ok` | yes | 201 `{"id": "ref-<key>"}` |
//! | `drop` | yes | none: the connection is closed |
//! | `slow:MS` | yes | 201 after MS milliseconds |
//! | `503:S`, `429:S` | no | that status with `Retry-After: S` |
//! | `400`, `409`, `422` | no | that status |
//! | `500` | yes | 500 (the effect happened; the client cannot know) |
//! | `sse` | yes | `text/event-stream` ending with `event: done` |
//! | `sse_cut` | yes | `text/event-stream` closed before `done` |
//! | `double` | twice (a buggy receiver) | none: the connection is closed |
//! | `hang:MS` | no | none: the connection is held MS milliseconds, then closed |
//!
//! `GET /effects?key=K` answers `{"data": [...]}`: one object per effect executed for K, its
//! request body plus `"id": "ref-K"` (`"ref-K-2"` for a second one) — a lookup for reconciliation.
//!
//! With `honours_keys`, a request whose key already has an effect executes nothing new and gets
//! the first answer again, as a receiver implementing the Idempotency-Key draft would.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How the receiver behaves.
#[derive(Debug, Clone, Default)]
pub struct ReceiverConfig {
    /// Replay the first answer for a repeated key instead of executing again.
    pub honours_keys: bool,
    /// Fraction (0–1) of answers to drop after executing, when the body names no faults.
    pub drop_rate: f64,
    /// Seed of the drop draw.
    pub seed: u64,
    /// When set, `GET /effects` (the lookup) answers 401 unless it carries
    /// `Authorization: Bearer <token>` — a lookup endpoint that needs a credential.
    pub lookup_token: Option<String>,
    /// Keep no copy of request bodies: [`Seen::body`] is null and the lookup answers each
    /// effect with its id alone, while keys, counts, faults and timings are kept as always. For
    /// benchmarks, whose hundreds of thousands of requests would otherwise be copied twice each
    /// into memory that the receiver, in the benchmark's own process, pays for. Such a
    /// receiver parses a body only when it could name faults.
    pub keep_no_bodies: bool,
    /// Keep no record of each request: [`Receiver::seen`] stays empty, while effects, their
    /// bodies (what the lookup answers with) and the count of requests per key are kept as
    /// always. For a receiver that runs for long (`oncebox receiver`), whose memory would
    /// otherwise grow with every request, repeated ones included.
    pub keep_no_history: bool,
}

/// What the receiver does with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Execute and answer 201.
    Ok,
    /// Execute, then close the connection without answering.
    Drop,
    /// Execute, answer after this many milliseconds.
    Slow(u64),
    /// Do not execute; answer this status with `Retry-After` seconds.
    RetryAfter(u16, u64),
    /// Do not execute; answer this status.
    Reject(u16),
    /// Execute; answer 500.
    ServerError,
    /// Execute; stream events ending with `done`.
    Sse,
    /// Execute; stream events and close before `done`.
    SseCut,
    /// Execute twice (two effects for one request), then close without answering.
    Double,
    /// Execute nothing; hold the connection this many milliseconds, then close it.
    Hang(u64),
}

impl Fault {
    fn parse(s: &str) -> Fault {
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        let n = arg.parse::<u64>().unwrap_or(0);
        match name {
            "drop" => Fault::Drop,
            "slow" => Fault::Slow(n),
            "503" => Fault::RetryAfter(503, n),
            "429" => Fault::RetryAfter(429, n),
            "500" => Fault::ServerError,
            "sse" => Fault::Sse,
            "sse_cut" => Fault::SseCut,
            "double" => Fault::Double,
            "hang" => Fault::Hang(n),
            other => other.parse::<u16>().map_or(Fault::Ok, Fault::Reject),
        }
    }

    fn executes(&self) -> bool {
        !matches!(
            self,
            Fault::RetryAfter(..) | Fault::Reject(_) | Fault::Hang(_)
        )
    }
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The `Idempotency-Key` header.
    pub key: String,
    /// The `X-Oncebox-Attempt` header.
    pub attempt: Option<u32>,
    /// When it arrived.
    pub at: std::time::Instant,
    /// When its answer was written (or the connection closed instead); `None` while the
    /// receiver is still at it.
    pub ended: Option<std::time::Instant>,
    /// The fault applied.
    pub fault: Fault,
    /// Whether it executed an effect.
    pub executed: bool,
    /// The request body as JSON (null when it was not JSON).
    pub body: Value,
}

#[derive(Default)]
struct State {
    effects: HashMap<String, u32>,
    bodies: HashMap<String, Vec<Value>>,
    seen: Vec<Seen>,
    requests_per_key: HashMap<String, usize>,
    rng: u64,
}

/// A running receiver. Dropping it stops accepting connections.
pub struct Receiver {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Starts a receiver on 127.0.0.1 at an ephemeral port.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start(config: ReceiverConfig) -> std::io::Result<Receiver> {
        Receiver::start_on(
            "127.0.0.1:0".parse().map_err(std::io::Error::other)?,
            config,
        )
        .await
    }

    /// Starts a receiver listening on `addr`.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start_on(addr: SocketAddr, config: ReceiverConfig) -> std::io::Result<Receiver> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            rng: config.seed | 1,
            ..State::default()
        }));
        let config = Arc::new(config);
        let st = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (st, config) = (st.clone(), config.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, st, config).await;
                });
            }
        });
        Ok(Receiver { addr, state, task })
    }

    /// The URL to configure as the destination, e.g. `http://127.0.0.1:41234/effects`.
    pub fn url(&self) -> String {
        format!("http://{}/effects", self.addr)
    }

    /// Effects executed per key.
    pub fn effects(&self) -> HashMap<String, u32> {
        self.lock().effects.clone()
    }

    /// Every request seen, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.lock().seen.clone()
    }

    /// Total effects executed.
    pub fn total_effects(&self) -> u64 {
        self.lock().effects.values().map(|n| u64::from(*n)).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn serve(
    mut stream: TcpStream,
    state: Arc<Mutex<State>>,
    config: Arc<ReceiverConfig>,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    loop {
        let Some((head_len, content_length)) = read_head(&mut stream, &mut buf).await? else {
            return Ok(());
        };
        while buf.len() < head_len + content_length {
            if stream.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        }
        let head = String::from_utf8_lossy(&buf[..head_len]);
        let lookup = head
            .starts_with("GET ")
            .then(|| look_up_answer(&head, &state, &config));
        let key = header(&head, "Idempotency-Key")
            .unwrap_or_default()
            .to_owned();
        let attempt = header(&head, "X-Oncebox-Attempt").and_then(|a| a.parse().ok());
        let body = parse_body(&buf[head_len..head_len + content_length], &config);
        buf.drain(..head_len + content_length);
        if let Some((status, answer)) = lookup {
            respond(&mut stream, status, &[], &answer).await?;
            continue;
        }
        let (index, fault, replay) = execute(&state, &config, &key, attempt, body);
        let answered = answer(&mut stream, &key, fault, replay).await;
        if let Some(index) = index
            && let Some(seen) = state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .seen
                .get_mut(index)
        {
            seen.ended = Some(std::time::Instant::now());
        }
        if !answered? {
            return Ok(());
        }
    }
}

/// A request body as JSON (null when it is not JSON). A receiver that keeps no bodies reads one
/// only for its `"faults"`: a body that cannot name them (no `faults`, no `\u` escape that could
/// spell it) is not parsed at all.
fn parse_body(body: &[u8], config: &ReceiverConfig) -> Value {
    let may_name_faults =
        |b: &[u8]| b.windows(6).any(|w| w == b"faults") || b.windows(2).any(|w| w == b"\\u");
    if config.keep_no_bodies && !may_name_faults(body) {
        return Value::Null;
    }
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

/// The answer to a `GET` with request head `head`: the lookup, or 401 when it needs a token the
/// request does not carry.
fn look_up_answer(head: &str, state: &Mutex<State>, config: &ReceiverConfig) -> (u16, String) {
    if let Some(token) = &config.lookup_token
        && header(head, "Authorization") != Some(&format!("Bearer {token}"))
    {
        return (401, r#"{"error":"unauthorized"}"#.to_owned());
    }
    let target = head.split_whitespace().nth(1).unwrap_or_default();
    (200, look_up(state, target).to_string())
}

/// The value of header `name` in a request head.
fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `GET /effects?key=K`: one object per effect executed for K, its request body and its id.
fn look_up(state: &Mutex<State>, target: &str) -> Value {
    let key = target
        .split_once("key=")
        .map(|(_, k)| {
            let k = k.split('&').next().unwrap_or_default();
            percent_encoding::percent_decode_str(k)
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    let found = state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .bodies
        .get(&key)
        .cloned()
        .unwrap_or_default();
    let data: Vec<Value> = found
        .into_iter()
        .enumerate()
        .map(|(i, mut body)| {
            let id = if i == 0 {
                format!("ref-{key}")
            } else {
                format!("ref-{key}-{}", i + 1)
            };
            if let Some(obj) = body.as_object_mut() {
                obj.remove("faults");
                obj.insert("id".into(), Value::String(id));
            }
            body
        })
        .collect();
    json!({ "data": data })
}

/// Picks the fault of one request, executes its effect (unless the fault forbids it, or the
/// receiver honours keys and the key has one already) and notes what it saw. Returns where it
/// noted it (nowhere when it keeps no history), the fault and whether the answer is a replay.
fn execute(
    state: &Mutex<State>,
    config: &ReceiverConfig,
    key: &str,
    attempt: Option<u32>,
    body: Value,
) -> (Option<usize>, Fault, bool) {
    let mut st = state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let n = match st.requests_per_key.get_mut(key) {
        Some(c) => {
            *c += 1;
            *c - 1
        }
        None => {
            st.requests_per_key.insert(key.to_owned(), 1);
            0
        }
    };
    let scripted = body.get("faults").and_then(Value::as_array).map(|f| {
        f.get(n)
            .and_then(Value::as_str)
            .map_or(Fault::Ok, Fault::parse)
    });
    let fault = match scripted {
        Some(f) => f,
        None if config.drop_rate > 0.0 => {
            st.rng ^= st.rng << 13;
            st.rng ^= st.rng >> 7;
            st.rng ^= st.rng << 17;
            if (st.rng % 10_000) as f64 / 10_000.0 < config.drop_rate {
                Fault::Drop
            } else {
                Fault::Ok
            }
        }
        None => Fault::Ok,
    };
    let replay = config.honours_keys && st.effects.contains_key(key);
    let executed = fault.executes() && !replay;
    if executed {
        let times = if fault == Fault::Double { 2 } else { 1 };
        *st.effects.entry(key.to_owned()).or_insert(0) += times;
        let kept = match config.keep_no_bodies {
            true => Value::Object(serde_json::Map::new()),
            false => body.clone(),
        };
        let bodies = st.bodies.entry(key.to_owned()).or_default();
        for _ in 0..times {
            bodies.push(kept.clone());
        }
    }
    tracing::debug!(%key, ?fault, executed, replay, "receiver");
    if config.keep_no_history {
        return (None, fault, replay);
    }
    let body = match config.keep_no_bodies {
        true => Value::Null,
        false => body,
    };
    st.seen.push(Seen {
        key: key.to_owned(),
        attempt,
        at: std::time::Instant::now(),
        ended: None,
        fault: fault.clone(),
        executed,
        body,
    });
    (Some(st.seen.len() - 1), fault, replay)
}

/// Answers as `fault` says; false when the connection is to be closed.
async fn answer(
    stream: &mut TcpStream,
    key: &str,
    fault: Fault,
    replay: bool,
) -> std::io::Result<bool> {
    let id = Value::String(format!("ref-{key}"));
    let ok_body = format!(r#"{{"id":{id},"replayed":{replay}}}"#);
    match fault {
        Fault::Ok => respond(stream, 201, &[], &ok_body).await?,
        Fault::Double | Fault::Drop => return Ok(false),
        Fault::Hang(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            return Ok(false);
        }
        Fault::Slow(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            respond(stream, 201, &[], &ok_body).await?;
        }
        Fault::RetryAfter(status, secs) => {
            respond(
                stream,
                status,
                &[("Retry-After", secs.to_string())],
                "{\"error\":\"busy\"}",
            )
            .await?;
        }
        Fault::Reject(status) => respond(stream, status, &[], "{\"error\":\"rejected\"}").await?,
        Fault::ServerError => respond(stream, 500, &[], "{\"error\":\"oops\"}").await?,
        Fault::Sse | Fault::SseCut => {
            let mut events = String::from("event: progress\ndata: {\"step\":1}\n\n");
            if fault == Fault::Sse {
                events.push_str(&format!("event: done\ndata: {ok_body}\n\n"));
            }
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            stream.write_all(head.as_bytes()).await?;
            stream.write_all(events.as_bytes()).await?;
            stream.flush().await?;
            return Ok(false);
        }
    }
    Ok(true)
}

/// Reads until the end of the request head; returns its length and the Content-Length.
async fn read_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<(usize, usize)>> {
    loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..pos]);
            let len = header(&head, "Content-Length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            return Ok(Some((pos + 4, len)));
        }
        if stream.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

async fn respond(
    stream: &mut TcpStream,
    status: u16,
    headers: &[(&str, String)],
    body: &str,
) -> std::io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    stream.write_all(out.as_bytes()).await?;
    stream.flush().await
}
