//! What never reaches a log: a worker at `debug` logs each delivery by key, but never the
//! original arguments of a redacted field nor a destination's header secret.

use serde_json::json;

use crate::env::*;

/// docs/security.md, "What is logged": a worker logging at `debug` delivers a redacted intent
/// with a secret header, refused and retried and then accepted, and one refused for good; its
/// whole log holds the keys but not the card number nor the header's secret.
#[tokio::test]
async fn a_debug_log_holds_keys_but_no_secret_and_no_redacted_value() {
    let rx = receiver(true).await;
    let secret = "s3cret-header-value-do-not-log";
    let text = config(
        &rx.url(),
        "key",
        "headers = { Authorization = \"Bearer ${RX_SECRET}\" }\n\
         retry = { max_attempts = 3, initial_delay = \"10ms\", max_delay = \"10ms\" }",
    )
    .replace(
        "destination = \"billing\"",
        "destination = \"billing\"\nredact = [{ pointer = \"/card\", mode = \"hash\" }]",
    );
    let env = Env::new("secrets", &text).await;
    let card = "4111111111111111";
    env.intent("card-ok", json!({"card": card, "faults": ["503", "ok"]}))
        .await;
    env.intent("card-refused", json!({"card": card, "faults": ["400"]}))
        .await;
    let (worker, log) = env.worker_logged("w", &[("RX_SECRET", secret), ("ONCEBOX_LOG", "debug")]);
    env.wait_status("card-ok", "succeeded").await;
    env.wait_status("card-refused", "failed").await;
    assert!(worker.stop().await.success());
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("card-ok") && text.contains("card-refused"),
        "the log names deliveries by key (positive control):\n{text}"
    );
    for (what, value) in [("the card number", card), ("the header secret", secret)] {
        assert!(!text.contains(value), "{what} is in the log");
    }
    let _ = std::fs::remove_file(&log);
    env.drop_db().await;
}
