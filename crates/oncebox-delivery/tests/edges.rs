//! The delivery layer's edges against real servers on 127.0.0.1: redirects are never followed
//! (deliveries, lookups, MCP calls), URLs in errors never show their query, and what a receiver
//! sends is read within bounds (a huge completion event, a lookup answer without end).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncebox_core::config::{Config, Destination};
use oncebox_delivery::{
    DeliveryOutcome, DeliveryRequest, HttpDestination, HttpLookup, LookupResult, MAX_LOOKUP_BYTES,
    MAX_RESPONSE_BYTES, McpDestination,
};
use serde_json::{Value, json};

/// A server whose `/go/{status}` answers that redirect to `/target?token=s3cret` (on this same
/// server), and which counts every request that reaches `/target`, whatever its method.
struct Redirector {
    base: String,
    followed: Arc<AtomicUsize>,
}

async fn redirect(Path(status): Path<u16>, State(base): State<String>) -> Response {
    let status = StatusCode::from_u16(status).expect("status");
    let location = format!("{base}/target?token=s3cret");
    (status, [(header::LOCATION, location)], "moved").into_response()
}

async fn redirector() -> Redirector {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let followed = Arc::new(AtomicUsize::new(0));
    let count = followed.clone();
    let app = Router::new()
        .route(
            "/go/{status}",
            axum::routing::any(redirect).with_state(base.clone()),
        )
        .route(
            "/target",
            axum::routing::any(move || {
                let count = count.clone();
                async move {
                    count.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::OK, r#"{"id": "from-the-redirect-target"}"#)
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Redirector { base, followed }
}

fn config(text: &str) -> Config {
    Config::from_toml(text).expect("config")
}

fn http_destination(url: &str, extra: &str) -> HttpDestination {
    let c = config(&format!(
        "[destinations.r]\nkind = \"http\"\nurl = \"{url}\"\nidempotency = \"key\"\ntimeout = \"5s\"\n{extra}"
    ));
    let Destination::Http(http) = &c.destinations["r"] else {
        panic!("an HTTP destination");
    };
    HttpDestination::new("r", http).expect("destination")
}

fn lookup(url: &str) -> HttpLookup {
    let c = config(&format!(
        "[destinations.r]\nkind = \"http\"\nurl = \"http://127.0.0.1:9/x\"\nidempotency = \"lookup\"\n\
         [destinations.r.lookup]\nurl = \"{url}\"\nresults_pointer = \"/data\"\ntimeout = \"5s\""
    ));
    let Destination::Http(http) = &c.destinations["r"] else {
        panic!("an HTTP destination");
    };
    HttpLookup::for_destination("r", http)
        .expect("lookup")
        .expect("configured")
}

fn request(arguments: &Value) -> DeliveryRequest<'_> {
    DeliveryRequest {
        tenant_id: "t1",
        delivery_key: "k-1",
        action: "create_invoice",
        attempt: 1,
        request_hash: "h",
        arguments,
    }
}

fn detail(o: &DeliveryOutcome) -> String {
    o.error().map(|e| e.detail.clone()).unwrap_or_default()
}

/// A 301 or 302 would turn the POST into a body-less GET whose 200 looked like success; a 307 or
/// 308 would re-send the arguments and credentials to wherever the receiver points. Each is a
/// permanent failure naming where it pointed (without its query), and nothing reaches there.
#[tokio::test]
async fn a_delivery_follows_no_redirect() {
    let r = redirector().await;
    let args = json!({"order": 1});
    for status in [301, 302, 303, 307, 308] {
        let dest = http_destination(
            &format!("{}/go/{status}", r.base),
            "headers = { X-Api-Key = \"k\" }",
        );
        let o = dest.deliver(&request(&args), Duration::from_secs(10)).await;
        let DeliveryOutcome::Permanent { error } = &o else {
            panic!("{status}: {o:?}");
        };
        assert_eq!(error.status_code, Some(status), "{status}");
        assert!(
            error
                .detail
                .contains(&format!("redirect to {}/target", r.base))
                && error.detail.contains("not followed"),
            "{status}: {}",
            error.detail
        );
        assert!(!error.detail.contains("s3cret"), "{}", error.detail);
    }
    assert_eq!(
        r.followed.load(Ordering::SeqCst),
        0,
        "no redirect was followed"
    );
}

#[tokio::test]
async fn a_lookup_follows_no_redirect() {
    let r = redirector().await;
    let l = lookup(&format!("{}/go/302?key={{key}}", r.base));
    match l.lookup("t", "k-1", None).await {
        LookupResult::Failed {
            transient: false,
            detail,
        } => {
            assert!(
                detail.contains("redirect") && detail.contains("/target"),
                "{detail}"
            );
            assert!(!detail.contains("s3cret"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.followed.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_mcp_call_follows_no_redirect() {
    let r = redirector().await;
    let c = config(&format!(
        "[destinations.m]\nkind = \"mcp\"\nurl = \"{}/go/307\"\nidempotency = \"key\"\ntimeout = \"5s\"",
        r.base
    ));
    let Destination::Mcp(mcp) = &c.destinations["m"] else {
        panic!("an MCP destination");
    };
    let dest = McpDestination::new("m", mcp).expect("destination");
    let args = json!({"order": 1});
    let o = dest.deliver(&request(&args), Duration::from_secs(10)).await;
    assert!(
        matches!(o, DeliveryOutcome::Permanent { .. }),
        "a session the server redirects is refused for good: {o:?}"
    );
    assert!(detail(&o).contains("redirect"), "{}", detail(&o));
    assert_eq!(r.followed.load(Ordering::SeqCst), 0);
}

/// A credential in a destination's or a lookup's query string never shows in what an agent
/// reads: errors carry scheme, host and path only.
#[tokio::test]
async fn errors_show_no_query_string() {
    // Nothing listens on port 1: the connection is refused.
    let dest = http_destination("http://127.0.0.1:1/charge?api_key=s3cret", "");
    let args = json!({});
    let o = dest.deliver(&request(&args), Duration::from_secs(10)).await;
    assert!(
        matches!(o, DeliveryOutcome::RetryBeforeExecution { .. }),
        "{o:?}"
    );
    assert!(
        detail(&o).contains("127.0.0.1:1/charge"),
        "the host and path stay: {}",
        detail(&o)
    );
    assert!(!detail(&o).contains("s3cret"), "{}", detail(&o));

    let l = lookup("http://127.0.0.1:1/find?api_key=s3cret&key={key}");
    let LookupResult::Failed { detail, .. } = l.lookup("t", "k-1", None).await else {
        panic!("nothing listens");
    };
    assert!(detail.contains("http://127.0.0.1:1/find"), "{detail}");
    assert!(!detail.contains("s3cret"), "{detail}");
}

/// A server of one route answering with `respond`.
async fn serve_one(respond: fn() -> Response) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/r", listener.local_addr().expect("addr"));
    let app = Router::new().route("/r", axum::routing::any(move || async move { respond() }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A completion event of 3 MiB is kept to 64 KiB like any answer, marked truncated.
#[tokio::test]
async fn a_huge_completion_event_is_kept_to_the_limit() {
    let url = serve_one(|| {
        let data = json!({"id": "r-1", "blob": "x".repeat(3 * 1024 * 1024)});
        let stream = format!("event: progress\ndata: {{}}\n\nevent: done\ndata: {data}\n\n");
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/event-stream")],
            stream,
        )
            .into_response()
    })
    .await;
    let dest = http_destination(&url, "completion_event = \"done\"");
    let args = json!({});
    let o = dest.deliver(&request(&args), Duration::from_secs(10)).await;
    let DeliveryOutcome::Succeeded { response, .. } = &o else {
        panic!("{o:?}");
    };
    let response = response.as_ref().expect("kept");
    assert_eq!(response["truncated"], true, "marked");
    let kept = response.to_string().len();
    assert!(
        kept <= MAX_RESPONSE_BYTES + 1024,
        "{kept} bytes kept of a 3 MiB event"
    );
}

/// A lookup answer without end is refused once it passes the limit, not read until the
/// lookup's timeout (nor held whole in memory); one that announces its size beyond the limit
/// is refused without being read.
#[tokio::test]
async fn a_lookup_answer_past_the_limit_is_refused_as_it_arrives() {
    let endless = serve_one(|| {
        let chunk = axum::body::Bytes::from(vec![b' '; 64 * 1024]);
        let stream =
            futures_util::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
        (StatusCode::OK, Body::from_stream(stream)).into_response()
    })
    .await;
    let started = tokio::time::Instant::now();
    match lookup(&format!("{endless}?key={{key}}"))
        .lookup("t", "k", None)
        .await
    {
        LookupResult::Failed {
            transient: false,
            detail,
        } => assert!(
            detail.contains(&format!("exceeds {MAX_LOOKUP_BYTES} bytes")),
            "{detail}"
        ),
        other => panic!("{other:?} after {:?}", started.elapsed()),
    }
    // A raw server: it announces 200 MiB and sends none of it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let announced = format!("http://{}/r", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut c, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = c.read(&mut head).await;
                let _ = c
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 209715200\r\n\r\n")
                    .await;
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    let refused = lookup(&format!("{announced}?key={{key}}"))
        .lookup("t", "k", None)
        .await;
    assert!(
        matches!(&refused, LookupResult::Failed { transient: false, detail } if detail.contains("exceeds")),
        "{refused:?}"
    );
}

/// A server that keeps the headers of every request it gets and answers 201.
async fn header_recorder() -> (String, Arc<std::sync::Mutex<Vec<axum::http::HeaderMap>>>) {
    let seen: Arc<std::sync::Mutex<Vec<axum::http::HeaderMap>>> = Arc::default();
    let keep = seen.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/in", listener.local_addr().expect("addr"));
    let also = seen.clone();
    let app = Router::new()
        .route(
            "/in",
            axum::routing::post(move |headers: axum::http::HeaderMap| async move {
                keep.lock().expect("lock").push(headers);
                StatusCode::CREATED
            }),
        )
        .route(
            "/find",
            axum::routing::get(move |headers: axum::http::HeaderMap| async move {
                also.lock().expect("lock").push(headers);
                StatusCode::NOT_FOUND
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

/// A lookup carries its tenant and the delivery key beside the URL: one credential serves
/// every tenant, and the receiver must answer with that tenant's objects only.
#[tokio::test]
async fn a_lookup_carries_its_tenant_and_delivery_key() {
    let (url, seen) = header_recorder().await;
    let l = lookup(&format!("{}?key={{key}}", url.replace("/in", "/find")));
    assert_eq!(
        l.lookup("acme", "acme:inv-1", None).await,
        LookupResult::Found(Vec::new())
    );
    let seen = seen.lock().expect("lock");
    assert_eq!(seen.len(), 1);
    let header = |name: &str| seen[0].get(name).and_then(|v| v.to_str().ok());
    assert_eq!(header("x-oncebox-tenant"), Some("acme"));
    assert_eq!(header("idempotency-key"), Some("acme:inv-1"));
}

/// Every attempt carries the key, tenant, action, attempt, request hash and the JSON content
/// type, once each; a configured header of the same name does not replace or double them.
#[tokio::test]
async fn an_attempt_carries_its_own_headers_once_whatever_is_configured() {
    let (url, seen) = header_recorder().await;
    let dest = http_destination(
        &url,
        "[destinations.r.headers]\nIdempotency-Key = \"configured\"\nX-Oncebox-Tenant = \"other\"\n\
         Authorization = \"Bearer t\"",
    );
    let arguments = json!({"order": 1});
    let mut req = request(&arguments);
    req.attempt = 7;
    let o = dest.deliver(&req, Duration::from_secs(5)).await;
    assert!(matches!(o, DeliveryOutcome::Succeeded { .. }), "{o:?}");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1);
    let all = |n: &str| -> Vec<&str> {
        seen[0]
            .get_all(n)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect()
    };
    assert_eq!(all("idempotency-key"), ["k-1"]);
    assert_eq!(all("x-oncebox-tenant"), ["t1"]);
    assert_eq!(all("x-oncebox-action"), ["create_invoice"]);
    assert_eq!(all("x-oncebox-attempt"), ["7"]);
    assert_eq!(all("x-oncebox-request-hash"), ["h"]);
    assert_eq!(all("content-type"), ["application/json"]);
    assert_eq!(all("authorization"), ["Bearer t"]);
}

/// A key or tenant that cannot be an HTTP header value (a line break, NUL, DEL) fails for good
/// naming the field, and nothing is sent: sending it would be refused by the client, and no
/// retry could change it.
#[tokio::test]
async fn a_value_that_cannot_be_a_header_fails_for_good_and_sends_nothing() {
    let (url, seen) = header_recorder().await;
    let dest = http_destination(&url, "");
    let arguments = json!({});
    for (field, bad) in [
        ("delivery_key", "k\r\nX-Injected: 1"),
        ("delivery_key", "k\0"),
        ("tenant_id", "t\x7f"),
        ("action", "a\n"),
    ] {
        let mut req = request(&arguments);
        match field {
            "delivery_key" => req.delivery_key = bad,
            "tenant_id" => req.tenant_id = bad,
            _ => req.action = bad,
        }
        let o = dest.deliver(&req, Duration::from_secs(5)).await;
        match &o {
            DeliveryOutcome::Permanent { error } => {
                assert_eq!(error.code, oncebox_core::outcome::ErrorCode::PolicyRejected);
                assert!(error.detail.starts_with(field), "{field}: {o:?}");
            }
            other => panic!("{field} {bad:?}: {other:?}"),
        }
    }
    assert!(seen.lock().expect("lock").is_empty());
    // The same destination still delivers a valid request.
    let o = dest
        .deliver(&request(&arguments), Duration::from_secs(5))
        .await;
    assert!(matches!(o, DeliveryOutcome::Succeeded { .. }), "{o:?}");
    assert_eq!(seen.lock().expect("lock").len(), 1);
}
