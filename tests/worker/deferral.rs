//! Deliveries held back without an attempt — over their destination's rate, or while its
//! breaker is open — at destinations that do not honour keys: there a delivery is marked
//! dispatched before it is sent, and a mark made for a delivery that was then held back would
//! send it to reconciliation or to a person. Each is delivered once, with one attempt.

use std::collections::HashMap;

use serde_json::json;

use crate::env::*;

fn config(url: &str) -> String {
    format!(
        r#"
[actions.archive]
destination = "looked_up"
[actions.notify]
destination = "blind"
[actions.charge]
destination = "fragile"

[destinations.looked_up]
kind = "http"
url = "{url}"
idempotency = "lookup"
timeout = "2s"
rate_limit = {{ per_second = 4, burst = 1 }}
[destinations.looked_up.lookup]
url = "{url}?key={{key}}"
results_pointer = "/data"

[destinations.blind]
kind = "http"
url = "{url}"
idempotency = "none"
timeout = "2s"
rate_limit = {{ per_second = 4, burst = 1 }}

[destinations.fragile]
kind = "http"
url = "{url}"
idempotency = "none"
timeout = "2s"
retry = {{ max_attempts = 5, initial_delay = "50ms", max_delay = "100ms" }}
breaker = {{ failures = 1, cool_down = "3s" }}
"#
    )
}

#[tokio::test]
async fn deliveries_held_back_at_non_key_destinations_spend_no_attempt_and_go_once() {
    let rx = receiver(false).await;
    let env = Env::new("deferral", &config(&rx.url())).await;
    for i in 0..4 {
        for action in ["archive", "notify"] {
            env.submit(oncebox_core::NewIntent::new(
                oncebox_core::IntentNames {
                    tenant_id: "t1",
                    idempotency_key: &format!("{action}-{i}"),
                    action,
                },
                json!({"n": i}),
            ))
            .await;
        }
    }
    // The first charge is answered 503 (not executed): the breaker opens, and the others are
    // held back until its probe succeeds.
    env.submit(oncebox_core::NewIntent::new(
        oncebox_core::IntentNames {
            tenant_id: "t1",
            idempotency_key: "charge-0",
            action: "charge",
        },
        json!({"n": 0, "faults": ["503:0", "ok"]}),
    ))
    .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_until(
        std::time::Duration::from_secs(30),
        "the breaker to open",
        || async {
            env.count(
                "SELECT count(*) FROM oncebox.destination_state \
                 WHERE destination = 'fragile' AND state = 'open'",
            )
            .await
                == 1
        },
    )
    .await;
    for i in 1..4 {
        env.submit(oncebox_core::NewIntent::new(
            oncebox_core::IntentNames {
                tenant_id: "t1",
                idempotency_key: &format!("charge-{i}"),
                action: "charge",
            },
            json!({"n": i}),
        ))
        .await;
    }
    env.wait_until(
        std::time::Duration::from_secs(30),
        "every intent succeeded",
        || async { env.status_counts().await.get("succeeded") == Some(&12) },
    )
    .await;
    assert!(worker.stop().await.success());

    // (attempts, the epoch of the attempt that succeeded) per key.
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT i.idempotency_key, count(*), max(a.epoch) FROM oncebox.intents i \
         JOIN oncebox.attempts a ON a.intent_id = i.id GROUP BY i.idempotency_key",
    )
    .fetch_all(&env.pool)
    .await
    .expect("attempts");
    let attempts: HashMap<String, (i64, i64)> =
        rows.into_iter().map(|(k, n, e)| (k, (n, e))).collect();
    let held_back = |prefix: &str| {
        attempts
            .iter()
            .filter(|(k, (_, epoch))| k.starts_with(prefix) && *epoch >= 2)
            .count()
    };
    for prefix in ["archive", "notify", "charge-1", "charge-2", "charge-3"] {
        assert!(held_back(prefix) >= 1, "some {prefix} was held back first");
    }
    for (key, (n, _)) in &attempts {
        let expected = if key == "charge-0" { 2 } else { 1 };
        assert_eq!(*n, expected, "{key}: waiting spent no attempt");
    }
    let effects = rx.effects();
    assert_eq!(effects.len(), 12);
    assert!(effects.values().all(|n| *n == 1), "{effects:?}");
    let posts = rx.seen().len();
    assert_eq!(posts, 13, "one request each, and the 503 before the probe");
    env.drop_db().await;
}
