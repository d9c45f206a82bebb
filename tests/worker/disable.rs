//! An operator's disable holds for every destination of every kind — an HTTP destination without
//! a breaker, an AMQP exchange, an MCP server — counted where each receives: intents wait queued
//! without an attempt (their deadlines still run), the workers' gauge says so, and enabling
//! delivers each intent once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use oncebox_core::{IntentNames, NewIntent};
use serde_json::{Value, json};

use crate::broker::*;
use crate::env::*;
use crate::support::free_addr;

/// A minimal MCP server over streamable HTTP: a session, and `tools/call` answered with a
/// ticket; every call is counted, by its key in `_meta`.
#[derive(Clone, Default)]
struct Upstream {
    calls: Arc<Mutex<Vec<String>>>,
}

async fn mcp(State(u): State<Upstream>, Json(msg): Json<Value>) -> Response {
    let id = msg["id"].clone();
    let answer = |result: Value| Json(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    match msg["method"].as_str().unwrap_or_default() {
        "initialize" => (
            [("mcp-session-id", "s-1")],
            answer(
                json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                "serverInfo": {"name": "upstream", "version": "1"}}),
            ),
        )
            .into_response(),
        "tools/call" => {
            let key = msg["params"]["_meta"]["oncebox.dev/idempotency_key"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            u.calls.lock().expect("lock").push(key);
            answer(json!({"content": [{"type": "text", "text": "ok"}],
                "structuredContent": {"ticket": "T-1"}}))
            .into_response()
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

async fn upstream() -> (Upstream, String) {
    let u = Upstream::default();
    let app = axum::Router::new()
        .route("/mcp", axum::routing::post(mcp))
        .with_state(u.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (u, url)
}

fn config(http: &str, queue: &str, mcp: &str) -> String {
    format!(
        r#"
[actions.create_invoice]
destination = "billing"
[actions.publish_event]
destination = "bus"
[actions.open_ticket]
destination = "desk"

[destinations.billing]
kind = "http"
url = "{http}"
idempotency = "none"
timeout = "2s"

[destinations.bus]
kind = "amqp"
exchange = ""
routing_key = "{queue}"
idempotency = "key"
timeout = "3s"

[destinations.desk]
kind = "mcp"
url = "{mcp}"
tool = "open_ticket"
idempotency = "key"
timeout = "2s"
"#
    )
}

const DESTINATIONS: [(&str, &str); 3] = [
    ("billing", "create_invoice"),
    ("bus", "publish_event"),
    ("desk", "open_ticket"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_any_destination_holds_its_deliveries_until_it_is_enabled() {
    let _one_at_a_time = AMQP.lock().await;
    let rx = receiver(false).await;
    let (desk, mcp_url) = upstream().await;
    let queue = format!("oncebox_w_disable_{}.events", std::process::id());
    declare_consumer_queue(&queue).await;
    let env = Env::new("disable", &config(&rx.url(), &queue, &mcp_url)).await;

    // A name the configuration does not know is refused, naming those it does.
    let (code, _, err) = ops(
        &env,
        &["destinations", "disable", "biling", "--reason", "x"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no destination") && err.contains("billing, bus, desk"),
        "{err}"
    );
    for (destination, _) in DESTINATIONS {
        let (code, listed, err) = ops(
            &env,
            &[
                "destinations",
                "disable",
                destination,
                "--reason",
                "maintenance",
            ],
        );
        assert_eq!(code, 0, "{err}");
        let state = listed
            .as_array()
            .and_then(|l| l.iter().find(|s| s["destination"] == destination))
            .map(|s| s["state"].clone());
        assert_eq!(state, Some(json!("disabled")), "{listed}");
    }

    for (_, action) in DESTINATIONS {
        for i in 0..3 {
            env.submit(NewIntent::new(
                IntentNames {
                    tenant_id: "t1",
                    idempotency_key: &format!("{action}-{i}"),
                    action,
                },
                json!({"n": i}),
            ))
            .await;
        }
    }
    // One more whose deadline comes while its destination is disabled.
    env.submit(NewIntent {
        deadline: Some(std::time::SystemTime::now() + Duration::from_secs(3)),
        ..NewIntent::new(
            IntentNames {
                tenant_id: "t1",
                idempotency_key: "late",
                action: "create_invoice",
            },
            json!({"n": 9}),
        )
    })
    .await;
    let metrics = free_addr();
    let worker = env.worker_with(
        "d1",
        &[("AMQP_URL", &amqp_url())],
        "5s",
        &["--metrics-addr", &metrics],
    );

    // Every row has been claimed and given back parked: the worker looked at each and sent none.
    env.wait_until(Duration::from_secs(30), "every delivery parked", || async {
        env.count(
            "SELECT count(*) FROM oncebox.outbox o JOIN oncebox.intents i ON i.id = o.intent_id \
                 WHERE i.idempotency_key <> 'late' AND o.epoch >= 1 AND o.lease_owner IS NULL \
                 AND o.available_at > now() + interval '1 minute'",
        )
        .await
            == 9
    })
    .await;
    env.wait_status("late", "expired").await;
    env.wait_until(
        Duration::from_secs(30),
        "the worker's gauge to show the three disabled",
        || async {
            let body = scrape(&metrics).await;
            DESTINATIONS.iter().all(|(d, _)| {
                metric(
                    &body,
                    &format!("oncebox_destination_state{{destination=\"{d}\",state=\"disabled\"}}"),
                ) == Some(1.0)
            })
        },
    )
    .await;
    assert!(rx.seen().is_empty(), "no HTTP request: {:?}", rx.seen());
    assert!(desk.calls.lock().expect("lock").is_empty(), "no MCP call");
    assert_eq!(queue_messages(&queue), Some(0), "no AMQP message");
    assert_eq!(
        env.count("SELECT count(*) FROM oncebox.attempts WHERE intent_id IN (SELECT id FROM oncebox.intents WHERE idempotency_key <> 'late')")
            .await,
        0,
        "waiting spent no attempt"
    );
    assert_eq!(
        env.count("SELECT count(*) FROM oncebox.outbox WHERE dispatched_at IS NOT NULL")
            .await,
        0,
        "nothing was marked dispatched"
    );
    assert_eq!(env.status_counts().await.get("pending"), Some(&9));
    assert_eq!(reports(&env, "late").await, ["expired"]);

    for (destination, _) in DESTINATIONS {
        let (code, listed, err) = ops(&env, &["destinations", "enable", destination]);
        assert_eq!(code, 0, "{err}");
        let state = listed
            .as_array()
            .and_then(|l| l.iter().find(|s| s["destination"] == destination))
            .map(|s| s["state"].clone());
        assert_eq!(state, Some(json!("closed")), "{listed}");
    }
    env.wait_until(Duration::from_secs(30), "everything delivered", || async {
        env.status_counts().await.get("succeeded") == Some(&9)
    })
    .await;
    assert!(worker.stop().await.success());

    let mut http: Vec<String> = rx.seen().into_iter().map(|s| s.key).collect();
    http.sort();
    assert_eq!(
        http,
        ["create_invoice-0", "create_invoice-1", "create_invoice-2"].map(dk)
    );
    let mut calls = desk.calls.lock().expect("lock").clone();
    calls.sort();
    assert_eq!(
        calls,
        ["open_ticket-0", "open_ticket-1", "open_ticket-2"].map(dk)
    );
    let mut published: Vec<String> = drain_queue(&queue)
        .await
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    published.sort();
    assert_eq!(
        published,
        ["publish_event-0", "publish_event-1", "publish_event-2"].map(dk)
    );
    delete_queues(&[queue.clone(), format!("{queue}.dlq")]).await;
    env.drop_db().await;
}
