//! The MCP adapter against a scripted streamable HTTP server on 127.0.0.1: the session, the key
//! in `_meta`, JSON and event-stream answers, and every class of outcome. (The official Python
//! SDK's server is the upstream of the end-to-end tests in python/tests.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncebox_core::config::{Config, Destination};
use oncebox_core::outcome::ErrorCode;
use oncebox_delivery::{DeliveryOutcome, DeliveryRequest, McpDestination};
use serde_json::{Value, json};

/// How the scripted server answers `tools/call`.
#[derive(Clone, Copy, PartialEq)]
enum Script {
    Json,
    /// 404 to calls in the first session (as a server that restarted).
    ForgetFirstSession,
    /// An event stream: a progress notification, then the answer.
    Stream,
    /// An event stream that ends without the answer.
    StreamWithoutAnswer,
    RpcError(i64),
    IsError,
    /// 401 to `initialize`.
    RefuseSession,
}

#[derive(Default)]
struct Seen {
    sessions: u32,
    /// (session id header, `_meta`, idempotency-key headers joined by ", ") of each call that
    /// ran.
    calls: Vec<(Option<String>, Value, Option<String>)>,
}

#[derive(Clone)]
struct Server {
    script: Script,
    seen: Arc<Mutex<Seen>>,
}

async fn handle(State(s): State<Server>, headers: HeaderMap, Json(msg): Json<Value>) -> Response {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let id = msg["id"].clone();
    let answer = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    match msg["method"].as_str().unwrap_or_default() {
        "initialize" if s.script == Script::RefuseSession => {
            StatusCode::UNAUTHORIZED.into_response()
        }
        "initialize" => {
            let n = {
                let mut seen = s.seen.lock().expect("lock");
                seen.sessions += 1;
                seen.sessions
            };
            let result = json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "scripted", "version": "1"}});
            ([("mcp-session-id", format!("s-{n}"))], Json(answer(result))).into_response()
        }
        "notifications/initialized" => StatusCode::ACCEPTED.into_response(),
        "tools/call" => {
            let session = text("mcp-session-id");
            if s.script == Script::ForgetFirstSession && session.as_deref() == Some("s-1") {
                return StatusCode::NOT_FOUND.into_response();
            }
            assert_eq!(text("mcp-protocol-version").as_deref(), Some("2025-06-18"));
            let keys: Vec<&str> = headers
                .get_all("idempotency-key")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            let call = (
                session,
                msg["params"]["_meta"].clone(),
                (!keys.is_empty()).then(|| keys.join(", ")),
            );
            s.seen.lock().expect("lock").calls.push(call);
            let ok = json!({"content": [{"type": "text", "text": "{\"ticket\":\"T-9\"}"}],
                "structuredContent": {"ticket": "T-9"}});
            let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1}});
            let sse = |events: Vec<Value>| {
                let body: String = events
                    .iter()
                    .map(|e| format!("event: message\ndata: {e}\n\n"))
                    .collect();
                ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
            };
            match s.script {
                Script::Stream => sse(vec![progress, answer(ok)]),
                Script::StreamWithoutAnswer => sse(vec![progress]),
                Script::RpcError(code) => Json(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": code, "message": "no such tool"}}))
                .into_response(),
                Script::IsError => Json(answer(json!({"isError": true,
                    "content": [{"type": "text", "text": "the queue is closed"}]})))
                .into_response(),
                _ => Json(answer(ok)).into_response(),
            }
        }
        other => panic!("unexpected method {other}"),
    }
}

async fn serve(script: Script) -> (String, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(handle))
        .with_state(Server {
            script,
            seen: seen.clone(),
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn destination(url: &str) -> McpDestination {
    destination_with(url, "")
}

/// The destination at `url` with `extra` TOML after its table.
fn destination_with(url: &str, extra: &str) -> McpDestination {
    let text = format!(
        "[destinations.d]\nkind = \"mcp\"\nurl = \"{url}\"\ntool = \"create_ticket\"\n\
         idempotency = \"key\"\ntimeout = \"2s\"\nreference_pointer = \"/ticket\"\n{extra}"
    );
    let config = Config::from_toml(&text).expect("config");
    let Destination::Mcp(mcp) = &config.destinations["d"] else {
        panic!("an MCP destination");
    };
    McpDestination::new("d", mcp).expect("destination")
}

async fn call(dest: &McpDestination, key: &str, attempt: u32) -> DeliveryOutcome {
    let arguments = json!({"subject": "jammed"});
    let req = DeliveryRequest {
        tenant_id: "t1",
        delivery_key: key,
        action: "open_ticket",
        attempt,
        request_hash: "h",
        arguments: &arguments,
    };
    dest.deliver(&req, Duration::from_secs(30)).await
}

fn code(o: &DeliveryOutcome) -> Option<ErrorCode> {
    o.error().map(|e| e.code)
}

#[tokio::test]
async fn a_call_carries_the_key_in_meta_and_its_result_is_the_effect() {
    let (url, seen) = serve(Script::Json).await;
    // A configured header of the key's name is replaced by the call's key, not sent beside it.
    let dest = destination_with(
        &url,
        "[destinations.d.headers]\nIdempotency-Key = \"configured\"\n",
    );
    for (key, attempt) in [("k-1", 1), ("k-2", 3)] {
        match call(&dest, key, attempt).await {
            DeliveryOutcome::Succeeded {
                external_reference,
                response,
                ..
            } => {
                assert_eq!(external_reference.as_deref(), Some("T-9"));
                assert_eq!(response, Some(json!({"ticket": "T-9"})));
            }
            other => panic!("{other:?}"),
        }
    }
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.sessions, 1, "one session serves every call");
    let (session, meta, header) = &seen.calls[1];
    assert_eq!(session.as_deref(), Some("s-1"));
    assert_eq!(
        meta,
        &json!({"oncebox.dev/idempotency_key": "k-2", "oncebox.dev/tenant": "t1",
                "oncebox.dev/attempt": 3})
    );
    assert_eq!(header.as_deref(), Some("k-2"));
}

#[tokio::test]
async fn a_session_the_server_forgot_is_opened_again_and_the_call_runs_once() {
    let (url, seen) = serve(Script::ForgetFirstSession).await;
    let outcome = call(&destination(&url), "k-1", 1).await;
    assert!(
        matches!(outcome, DeliveryOutcome::Succeeded { .. }),
        "{outcome:?}"
    );
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.sessions, 2);
    assert_eq!(seen.calls.len(), 1);
    assert_eq!(seen.calls[0].0.as_deref(), Some("s-2"));
}

#[tokio::test]
async fn an_event_stream_answer_is_read_past_notifications_and_one_without_is_unknown() {
    let (url, _) = serve(Script::Stream).await;
    let outcome = call(&destination(&url), "k-1", 1).await;
    assert!(
        matches!(outcome, DeliveryOutcome::Succeeded { .. }),
        "{outcome:?}"
    );
    let (url, _) = serve(Script::StreamWithoutAnswer).await;
    let outcome = call(&destination(&url), "k-1", 1).await;
    assert!(
        matches!(outcome, DeliveryOutcome::Unknown { .. }),
        "{outcome:?}"
    );
    assert_eq!(code(&outcome), Some(ErrorCode::StreamIncomplete));
}

#[tokio::test]
async fn refusals_and_tool_errors_fail_for_good_and_other_rpc_errors_are_unknown() {
    for (script, permanent) in [
        (Script::RpcError(-32602), true),
        (Script::IsError, true),
        (Script::RpcError(-32603), false),
    ] {
        let (url, _) = serve(script).await;
        let outcome = call(&destination(&url), "k-1", 1).await;
        assert_eq!(code(&outcome), Some(ErrorCode::ToolError), "{outcome:?}");
        let is_permanent = matches!(outcome, DeliveryOutcome::Permanent { .. });
        assert_eq!(is_permanent, permanent, "{outcome:?}");
    }
}

#[tokio::test]
async fn no_tool_runs_without_a_session_or_a_connection() {
    let (url, seen) = serve(Script::RefuseSession).await;
    let outcome = call(&destination(&url), "k-1", 1).await;
    assert!(
        matches!(outcome, DeliveryOutcome::Permanent { .. }),
        "{outcome:?}"
    );
    assert_eq!(outcome.error().and_then(|e| e.status_code), Some(401));
    assert!(seen.lock().expect("lock").calls.is_empty());
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", closed.local_addr().expect("addr"));
    drop(closed);
    let outcome = call(&destination(&url), "k-1", 1).await;
    assert!(
        matches!(outcome, DeliveryOutcome::RetryBeforeExecution { .. }),
        "{outcome:?}"
    );
    assert_eq!(code(&outcome), Some(ErrorCode::ConnectRefused));
}
