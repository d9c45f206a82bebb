//! Reconciliation: unknown outcomes at receivers that do not honour keys, looked up by key.

use std::time::Duration;

use oncebox_receiver::{Receiver, ReceiverConfig};
use serde_json::json;

use crate::env::*;

#[tokio::test]
async fn a_dropped_answer_at_a_non_key_receiver_is_reconciled_without_a_second_effect() {
    let rx = receiver(false).await;
    let env = Env::new("reconciled", &reconcile_config(&rx, "30s")).await;
    env.intent("dropped", json!({"n": 7, "faults": ["drop"]}))
        .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_status("dropped", "succeeded").await;
    assert!(worker.stop().await.success());
    let reference: String = env
        .scalar("SELECT external_reference FROM oncebox.intents")
        .await;
    assert_eq!(reference, format!("ref-{}", dk("dropped")));
    assert_eq!(
        rx.effects().get(&dk("dropped")),
        Some(&1),
        "no second effect"
    );
    assert_eq!(
        rx.seen().len(),
        1,
        "one POST: the answer was looked up, not re-sent"
    );
    assert_eq!(reports(&env, "dropped").await, ["unknown", "lookup_found"]);
    env.drop_db().await;
}

/// A lookup endpoint that needs a credential: the lookup sends the destination's own headers
/// (with their `${ENV}` secrets). Lookups used to send only `Accept`, were answered 401, and every
/// unknown outcome there ended `needs_review`.
#[tokio::test]
async fn a_lookup_that_needs_a_token_sends_the_destination_headers() {
    let rx = Receiver::start(ReceiverConfig {
        lookup_token: Some("s3cret".into()),
        ..ReceiverConfig::default()
    })
    .await
    .expect("receiver");
    let config = reconcile_config(&rx, "30s").replace(
        "consistency_window",
        "headers = { Authorization = \"Bearer ${RX_TOKEN}\" }\nconsistency_window",
    );
    let env = Env::new("lookup_auth", &config).await;
    env.intent("dropped", json!({"n": 7, "faults": ["drop"]}))
        .await;
    let worker = env.worker("w", &[("RX_TOKEN", "s3cret")], "5s");
    env.wait_status("dropped", "succeeded").await;
    assert!(worker.stop().await.success());
    assert_eq!(reports(&env, "dropped").await, ["unknown", "lookup_found"]);
    assert_eq!(
        rx.effects().get(&dk("dropped")),
        Some(&1),
        "no second effect"
    );
    env.drop_db().await;
}

#[tokio::test]
async fn nothing_found_is_reissued_only_after_the_consistency_window() {
    let rx = receiver(false).await;
    // The shortest window a worker accepts: its lease (3 s) plus the destination's timeout.
    let env = Env::new("reissued", &reconcile_config(&rx, "4s")).await;
    // The first attempt never executes and never answers (timeout: unknown); the re-issue works.
    env.intent("lost", json!({"n": 1, "faults": ["hang:3000", "ok"]}))
        .await;
    let worker = env.worker("w", &[], "3s");
    env.wait_status("lost", "succeeded").await;
    assert!(worker.stop().await.success());
    let posts: Vec<_> = rx
        .seen()
        .into_iter()
        .filter(|s| s.key == dk("lost"))
        .map(|s| s.at)
        .collect();
    assert_eq!(posts.len(), 2);
    assert!(
        posts[1] - posts[0] >= Duration::from_secs(4),
        "re-issued {:?} after the first dispatch",
        posts[1] - posts[0]
    );
    assert_eq!(
        rx.effects().get(&dk("lost")),
        Some(&1),
        "exactly one effect"
    );
    let r = reports(&env, "lost").await;
    assert_eq!(r.first().map(String::as_str), Some("unknown"));
    assert!(
        r.contains(&"lookup_none".to_owned()),
        "looked again inside the window: {r:?}"
    );
    assert!(r.contains(&"reissue".to_owned()), "{r:?}");
    assert_eq!(r.last().map(String::as_str), Some("succeeded"));
    env.drop_db().await;
}

#[tokio::test]
async fn a_reconcile_only_worker_reconciles_and_delivers_nothing() {
    let rx = receiver(false).await;
    let env = Env::new("reconcile_only", &reconcile_config(&rx, "30s")).await;
    env.intent("dropped", json!({"n": 1, "faults": ["drop"]}))
        .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_status("dropped", "succeeded").await;
    assert!(worker.stop().await.success());
    // A second intent lost its answer too, but only a reconcile-only worker runs now.
    env.intent("queued", json!({"n": 2})).await;
    sqlx::query(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload, status, attempt_count)
         VALUES ('t1', 'orphan', 'create_invoice', repeat('0', 64), '{\"n\": 3}', 'unknown', 1)",
    )
    .execute(&env.pool)
    .await
    .expect("unknown intent");
    sqlx::query("INSERT INTO oncebox.outbox (intent_id, phase, tenant_id, dispatched_at) SELECT id, 'reconcile', tenant_id, now() - interval '1 hour' FROM oncebox.intents WHERE idempotency_key = 'orphan'")
        .execute(&env.pool)
        .await
        .expect("reconcile row");
    let worker = env.worker_with("r", &[], "5s", &["--reconcile-only"]);
    // Nothing found an hour after dispatch: re-issued (pending), but not delivered by this worker.
    env.wait_status("orphan", "pending").await;
    assert!(worker.stop().await.success());
    assert_eq!(
        env.status_of("queued").await,
        "pending",
        "no delivery by a reconcile-only worker"
    );
    assert_eq!(rx.seen().len(), 1, "only the first worker's POST");
    env.drop_db().await;
}

/// A lookup by reference (`{external_reference}` in its path) for an intent whose answer was
/// lost — so it has no reference — would ask for `/refunds/`, the receiver's listing of every
/// refund (another tenant's included). It is refused before any request: the intent needs a
/// person, and nothing found is kept as its response.
#[tokio::test]
async fn a_lookup_that_would_ask_for_a_listing_is_refused_and_keeps_nothing() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let rx = receiver(false).await;
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let refunds = axum::Router::new().route(
        "/refunds/{*rest}",
        axum::routing::get(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                axum::Json(json!({"data": [
                    {"id": "re-1", "email": "a@tenant-a.example", "iban": "DE00 0000"},
                    {"id": "re-2", "email": "b@tenant-a.example", "iban": "DE11 1111"},
                ]}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let lookup = format!(
        "http://{}/refunds/{{external_reference}}",
        listener.local_addr().expect("addr")
    );
    tokio::spawn(async move { axum::serve(listener, refunds).await });
    let env = Env::new(
        "listing",
        &config(
            &rx.url(),
            "lookup",
            &format!(
                "[destinations.billing.lookup]\nurl = \"{lookup}\"\nresults_pointer = \"/data\"\n\
                 reference_pointer = \"/id\"\ntimeout = \"1s\""
            ),
        ),
    )
    .await;
    env.intent("lost", json!({"n": 1, "faults": ["drop"]}))
        .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_status("lost", "needs_review").await;
    assert!(worker.stop().await.success());
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "no lookup request was made"
    );
    let response: Option<serde_json::Value> =
        env.scalar("SELECT response FROM oncebox.intents").await;
    assert_eq!(response, None, "nothing found is kept");
    let error: String = env
        .scalar("SELECT last_error->>'detail' FROM oncebox.intents")
        .await;
    assert!(error.contains("external_reference"), "{error}");
    assert_eq!(rx.effects().get(&dk("lost")), Some(&1), "no second effect");
    env.drop_db().await;
}

#[tokio::test]
async fn a_window_that_cannot_cover_a_request_on_its_way_is_refused_at_start() {
    let rx = receiver(false).await;
    let env = Env::new("short_window", &reconcile_config(&rx, "0s")).await;
    let (mut worker, log) = env.worker_logged("w", &[]);
    let exited = worker.exited_within(Duration::from_secs(20)).await;
    assert!(
        !exited.success(),
        "a worker with a window of 0s must not start"
    );
    let said = std::fs::read_to_string(&log).expect("log");
    for named in [
        "destinations.billing.consistency_window (0s)",
        "lease (30s)",
        "timeout (1s)",
    ] {
        assert!(said.contains(named), "{named} in: {said}");
    }
    // A window that covers the lease and the timeout starts.
    std::fs::write(&env.config, reconcile_config(&rx, "31s")).expect("config");
    let worker = env.worker("w2", &[], "30s");
    env.intent("covered", json!({"n": 1})).await;
    env.wait_status("covered", "succeeded").await;
    assert!(worker.stop().await.success());
    env.drop_db().await;
}
