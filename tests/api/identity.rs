//! A tool call's identity over `/mcp` never depends on the transport session: a client that
//! opens a new session for every call (as LangChain's MCP adapters do) or reconnects after a
//! restart gets the first call's intent back for the same call. Without a `_meta` key or run,
//! a call is its tool and identifying arguments within the action's dedupe window.

use super::edges::{mcp_delete, mcp_post, open_session};
use super::*;

/// Calls `tool` with `arguments` and `meta` in a session of its own, then ends the session:
/// the call's `structuredContent`, or its whole answer when it has none.
async fn call_alone(api: &Api, token: &str, tool: &str, arguments: Value, meta: Value) -> Value {
    let session = open_session(api, token).await.expect("session");
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta}});
    let (status, _, body) = mcp_post(api, token, Some(&session), call).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        mcp_delete(api, token, &session).await,
        StatusCode::NO_CONTENT
    );
    rpc_answer(&body)["result"]["structuredContent"].clone()
}

/// The JSON-RPC answer in a body: JSON, or an event stream whose `data:` lines carry it.
fn rpc_answer(body: &str) -> Value {
    if let Ok(answer) = serde_json::from_str::<Value>(body) {
        return answer;
    }
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {body}"))
}

async fn intents(api: &Api) -> i64 {
    let mut conn = PgConnection::connect(&api.db_url).await.expect("db");
    sqlx::query_scalar("SELECT count(*) FROM oncebox.intents")
        .fetch_one(&mut conn)
        .await
        .expect("count")
}

#[tokio::test]
async fn identical_calls_from_new_sessions_are_one_intent_within_the_window() {
    let api = Api::start_with("call_identity", &["--tool-wait", "100ms"]).await;
    let agent = api.token("tenant-a");
    let order = json!({"order_id": "o-1", "amount": "10.00"});
    let first = call_alone(&api, &agent, "create_invoice", order.clone(), json!({})).await;
    let key = first["idempotency_key"].as_str().expect("a key").to_owned();
    assert!(key.starts_with("call-"), "{first}");
    // The same call from a new session — what a framework does when an answer is lost — is the
    // same intent; another order is another.
    let again = call_alone(&api, &agent, "create_invoice", order.clone(), json!({})).await;
    assert_eq!(again["idempotency_key"], key.as_str());
    assert_eq!(intents(&api).await, 1);
    let other = json!({"order_id": "o-2", "amount": "10.00"});
    let second = call_alone(&api, &agent, "create_invoice", other, json!({})).await;
    assert_ne!(second["idempotency_key"], key.as_str());
    assert_eq!(intents(&api).await, 2);
    // An explicit key wins, and so does a run (with its step).
    let explicit = json!({"oncebox.dev/idempotency_key": "mine-1"});
    let mine = call_alone(&api, &agent, "create_invoice", order.clone(), explicit).await;
    assert_eq!(mine["idempotency_key"], "mine-1");
    let run = json!({"oncebox.dev/run_id": "run-7", "oncebox.dev/step": 2});
    let stepped = call_alone(&api, &agent, "create_invoice", order.clone(), run.clone()).await;
    let stepped_again = call_alone(&api, &agent, "create_invoice", order, run).await;
    assert_eq!(stepped["idempotency_key"], stepped_again["idempotency_key"]);
    assert_ne!(stepped["idempotency_key"], key.as_str());
    assert_eq!(intents(&api).await, 4);
    // Another tenant's identical call is its own intent.
    let other_tenant = api.token("tenant-b");
    let theirs = call_alone(
        &api,
        &other_tenant,
        "create_invoice",
        json!({"order_id": "o-1", "amount": "10.00"}),
        json!({}),
    )
    .await;
    assert_eq!(
        theirs["idempotency_key"],
        key.as_str(),
        "the same key, per tenant"
    );
    assert_eq!(intents(&api).await, 5);
    api.stop().await;
}

/// `charge` is identified by its order alone (`key = ["/order_id"]`) for 2 s: the same order is
/// one intent (another note for it is a conflict, not a second charge); a call without the
/// order is refused naming it; once the first intent is older than the window, the same call
/// is a new intent.
#[tokio::test]
async fn a_business_key_identifies_a_call_and_the_window_ends_it() {
    let api = Api::start_with("call_window", &["--tool-wait", "100ms"]).await;
    let agent = api.token("tenant-a");
    let charge = |note: &str| json!({"order_id": "o-9", "note": note});
    let first = call_alone(&api, &agent, "charge", charge("a"), json!({})).await;
    let key = first["idempotency_key"].as_str().expect("a key").to_owned();
    let again = call_alone(&api, &agent, "charge", charge("a"), json!({})).await;
    assert_eq!(again["idempotency_key"], key.as_str());
    let changed = call_alone(&api, &agent, "charge", charge("b"), json!({})).await;
    assert_eq!(changed["error"], "conflict", "{changed}");
    let missing = call_alone(&api, &agent, "charge", json!({"note": "a"}), json!({})).await;
    assert_eq!(missing["field"], "arguments/order_id", "{missing}");
    assert_eq!(intents(&api).await, 1);

    // Once the first intent is older than the window (a state, read from the database), the
    // same call starts a new one.
    let mut conn = PgConnection::connect(&api.db_url).await.expect("db");
    loop {
        let older: bool = sqlx::query_scalar(
            "SELECT now() - created_at > interval '2 seconds' FROM oncebox.intents",
        )
        .fetch_one(&mut conn)
        .await
        .expect("age");
        if older {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let later = call_alone(&api, &agent, "charge", charge("a"), json!({})).await;
    assert_ne!(later["idempotency_key"], key.as_str(), "{later}");
    assert_eq!(intents(&api).await, 2);
    api.stop().await;
}
