//! `oncebox ops` against intents a real worker produced.

use serde_json::json;

use crate::env::*;

#[tokio::test]
async fn ops_retry_resolve_cancel_purge_show_and_stats() {
    let rx = receiver(false).await;
    let env = Env::new("ops", &reconcile_config(&rx, "30s")).await;
    env.intent("refused", json!({"n": 1, "faults": ["400", "ok"]}))
        .await;
    env.intent("twice", json!({"n": 2, "faults": ["double"]}))
        .await;
    let worker = env.worker("w", &[], "5s");
    env.wait_status("refused", "failed").await;
    env.wait_status("twice", "needs_review").await;
    assert!(worker.stop().await.success());

    let (code, listed, _) = ops(&env, &["list", "--status", "failed"]);
    assert_eq!(code, 0);
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["idempotency_key"], "refused");
    assert_eq!(
        ops(&env, &["list", "--status", "done"]).0,
        2,
        "an unknown status is a usage error"
    );

    // Retry: failed -> pending, same key; the next worker delivers it once.
    let (code, retried, err) = ops(&env, &["retry", "refused", "--reason", "receiver fixed"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(retried["status"], "pending");
    assert_eq!(retried["idempotency_key"], "refused");
    // Cancel is refused once an attempt was made.
    let (code, _, err) = ops(&env, &["cancel", "refused"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("attempt"), "{err}");

    // Resolve the ambiguous one by hand.
    let (code, resolved, err) = ops(
        &env,
        &["resolve", "twice", "--succeeded", "--reference", "INV-2"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (
            resolved["status"].as_str(),
            resolved["external_reference"].as_str()
        ),
        (Some("succeeded"), Some("INV-2"))
    );
    assert_eq!(
        ops(&env, &["resolve", "twice", "--failed", "--reason", "x"]).0,
        3,
        "already decided"
    );
    assert_eq!(
        ops(&env, &["retry", "twice"]).0,
        3,
        "a succeeded intent is never retried"
    );
    let (code, shown, _) = ops(&env, &["show", "twice"]);
    assert_eq!(code, 0);
    let outcomes: Vec<&str> = shown["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|h| h["outcome"].as_str())
        .collect();
    assert_eq!(
        outcomes,
        ["unknown", "lookup_ambiguous", "operator_resolved"]
    );
    // A decision from the command line is recorded under the database role it connects as, with
    // --actor (here $USER) as the name for people.
    assert_eq!(shown["history"][2]["worker"], "ops:db:postgres");
    assert_eq!(ops(&env, &["show", "nope"]).0, 4);

    // Cancel before dispatch works; while a worker holds the lease it is refused.
    env.intent("later", json!({"n": 3})).await;
    let (code, cancelled, err) = ops(&env, &["cancel", "later", "--reason", "order withdrawn"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(cancelled["status"], "cancelled");
    // Each decision is in the audit log, newest first; refused ones are not.
    let (code, audit, err) = ops(&env, &["audit"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        audit
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r["label"] == "ana"),
        "{audit}"
    );
    let rows: Vec<(&str, &str, &str, &str, &str, &str, &str)> = audit
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            let s = |f: &str| r[f].as_str().unwrap_or("-");
            let via = s("via");
            let who = s("actor");
            (
                s("idempotency_key"),
                s("action"),
                who,
                via,
                s("reason"),
                s("status_before"),
                s("status_after"),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                "later",
                "cancel",
                "db:postgres",
                "cli",
                "order withdrawn",
                "pending",
                "cancelled"
            ),
            (
                "twice",
                "resolve",
                "db:postgres",
                "cli",
                "-",
                "needs_review",
                "succeeded"
            ),
            (
                "refused",
                "retry",
                "db:postgres",
                "cli",
                "receiver fixed",
                "failed",
                "pending"
            ),
        ]
    );
    assert_eq!(audit[0]["role"], "ops");
    let (code, one, _) = ops(&env, &["audit", "--key", "twice"]);
    assert_eq!((code, one.as_array().map(Vec::len)), (0, Some(1)));
    env.intent("held", json!({"n": 4})).await;
    sqlx::query(
        "UPDATE oncebox.outbox SET lease_owner = 'w9', lease_expires_at = now() + interval '2 seconds', epoch = epoch + 1
         WHERE intent_id = (SELECT id FROM oncebox.intents WHERE idempotency_key = 'held')",
    )
    .execute(&env.pool)
    .await
    .expect("lease");
    let (code, _, err) = ops(&env, &["cancel", "held"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("w9"), "{err}");

    // The retried intent is delivered by the next worker; cancelled ones never are.
    let worker = env.worker("w2", &[], "5s");
    env.wait_status("refused", "succeeded").await;
    env.wait_status("held", "succeeded").await;
    assert!(worker.stop().await.success());
    assert_eq!(rx.effects().get(&dk("refused")), Some(&1));
    assert!(
        !rx.effects().contains_key(&dk("later")),
        "a cancelled intent is never sent"
    );

    // Purge: only terminal intents past retention; never a non-terminal one.
    sqlx::query("UPDATE oncebox.intents SET completed_at = now() - interval '40 days' WHERE idempotency_key IN ('refused', 'twice')")
        .execute(&env.pool)
        .await
        .expect("age");
    env.intent("still-pending", json!({"n": 5})).await;
    sqlx::query("UPDATE oncebox.intents SET updated_at = now() - interval '40 days', created_at = now() - interval '40 days' WHERE idempotency_key = 'still-pending'")
        .execute(&env.pool)
        .await
        .expect("age");
    assert_eq!(
        ops(&env, &["purge", "--older-than", "1h"]).0,
        2,
        "retention under a day is refused"
    );
    let (code, purged, err) = ops(&env, &["purge"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(purged["purged"], 2);
    let keys: Vec<String> =
        sqlx::query_scalar("SELECT idempotency_key FROM oncebox.intents ORDER BY 1")
            .fetch_all(&env.pool)
            .await
            .expect("keys");
    assert_eq!(keys, ["held", "later", "still-pending"]);
    let orphans = env.count("SELECT count(*) FROM oncebox.attempts a WHERE NOT EXISTS (SELECT 1 FROM oncebox.intents i WHERE i.id = a.intent_id)").await;
    assert_eq!(orphans, 0, "their history went with them");

    let (code, stats, _) = ops(&env, &["stats"]);
    assert_eq!(code, 0);
    assert!(
        stats["stats"]["by_status"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "{stats}"
    );
    env.drop_db().await;
}

/// An operator's retry of a redacted intent re-sends exactly what its first attempt sent — the
/// journal holds only the redacted form — and attempt numbers go on where they stopped, with a
/// fresh retry budget. Before, the retry sent `{"customer":{"email":"sha256:…"},"payment":{}}`
/// and the history showed attempt #1 twice. Once the originals are gone, the retry is refused.
#[tokio::test]
async fn an_operator_retry_resends_the_original_request_with_the_next_attempt_number() {
    let rx = receiver(true).await;
    let text = config(
        &rx.url(),
        "key",
        "retry = { max_attempts = 2, initial_delay = \"10ms\", max_delay = \"10ms\" }",
    )
    .replace(
        "destination = \"billing\"",
        "destination = \"billing\"\nredact = [{ pointer = \"/customer/email\", mode = \"hash\" }, \
         { pointer = \"/payment/card\", mode = \"drop\" }]",
    );
    let env = Env::new("retry_redacted", &text).await;
    let original = |n: u32| {
        json!({"n": n, "customer": {"email": "ana@example.com"}, "payment": {"card": "4111"},
               "faults": ["503", "503", "ok"]})
    };
    env.intent("charge", original(1)).await;
    env.intent("gone", original(2)).await;
    let worker = env.worker("w", &[], "5s");
    env.wait_status("charge", "failed").await;
    env.wait_status("gone", "failed").await;
    assert!(worker.stop().await.success());
    let journal: serde_json::Value = env
        .scalar_for(
            "SELECT payload FROM oncebox.intents WHERE idempotency_key = $1",
            "charge",
        )
        .await;
    assert_ne!(journal["customer"]["email"], "ana@example.com", "redacted");
    assert_eq!(
        env.count("SELECT count(*) FROM oncebox.held_arguments")
            .await,
        2,
        "the originals of both failed intents are held"
    );

    let (code, _, err) = ops(&env, &["retry", "charge", "--reason", "card limit raised"]);
    assert_eq!(code, 0, "{err}");
    // The originals of the other one are gone (as for an intent failed before they were kept).
    sqlx::query("DELETE FROM oncebox.held_arguments WHERE intent_id = (SELECT id FROM oncebox.intents WHERE idempotency_key = 'gone')")
        .execute(&env.pool)
        .await
        .expect("forget");
    let (code, _, err) = ops(&env, &["retry", "gone"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("redacted") && err.contains("new key"), "{err}");
    assert_eq!(env.status_of("gone").await, "failed", "nothing changed");

    let worker = env.worker("w2", &[], "5s");
    env.wait_status("charge", "succeeded").await;
    assert!(worker.stop().await.success());
    let sent: Vec<_> = rx
        .seen()
        .into_iter()
        .filter(|s| s.key == dk("charge"))
        .collect();
    assert_eq!(
        sent.iter().map(|s| s.attempt).collect::<Vec<_>>(),
        [Some(1), Some(2), Some(3)],
        "attempt numbers only grow"
    );
    for s in &sent {
        assert_eq!(
            s.body,
            original(1),
            "attempt {:?} sent the original",
            s.attempt
        );
    }
    let numbers: Vec<i32> = sqlx::query_scalar(
        "SELECT attempt FROM oncebox.attempts WHERE intent_id = (SELECT id FROM oncebox.intents WHERE idempotency_key = 'charge') AND outcome <> 'operator_retry' ORDER BY id",
    )
    .fetch_all(&env.pool)
    .await
    .expect("history");
    assert_eq!(numbers, [1, 2, 3], "no attempt number twice in the history");
    assert_eq!(
        env.count("SELECT count(*) FROM oncebox.held_arguments")
            .await,
        0,
        "a retried intent's originals travel on its outbox row again, not beside it"
    );
    env.drop_db().await;
}

/// docs/operations.md, "Restoring a backup": a restored database may hold as queued a delivery
/// that was sent after the backup was taken. Sent blind it has a second effect (the control);
/// after `oncebox ops restored` the worker looks it up first and finds the effect.
#[tokio::test]
async fn after_a_restore_queued_deliveries_are_looked_up_not_sent_blind() {
    let rx = receiver(false).await;
    let env = Env::new("restored", &reconcile_config(&rx, "30s")).await;
    oncebox_delivery::install_crypto_provider();
    // What a worker did after the backup: the receiver executed the intent, the restored
    // database does not know.
    let sent_after_backup = |key: &'static str, n: u32| {
        let url = rx.url();
        async move {
            let r = reqwest::Client::new()
                .post(url)
                .header("Idempotency-Key", dk(key))
                .header("Content-Type", "application/json")
                .body(json!({"n": n}).to_string())
                .send()
                .await
                .expect("receiver");
            assert!(r.status().is_success());
        }
    };
    env.intent("control", json!({"n": 1})).await;
    sent_after_backup("control", 1).await;
    let worker = env.worker("w1", &[], "5s");
    env.wait_status("control", "succeeded").await;
    assert!(worker.stop().await.success());
    assert_eq!(
        rx.effects().get(&dk("control")),
        Some(&2),
        "sent blind: a second effect"
    );

    env.intent("restored", json!({"n": 2})).await;
    sent_after_backup("restored", 2).await;
    let (code, marked, err) = ops(&env, &["restored"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(marked["marked"], 1);
    let worker = env.worker("w2", &[], "5s");
    env.wait_status("restored", "succeeded").await;
    assert!(worker.stop().await.success());
    assert_eq!(
        rx.effects().get(&dk("restored")),
        Some(&1),
        "looked up: no second effect"
    );
    assert_eq!(
        reports(&env, "restored").await,
        ["previous_outcome_unknown", "lookup_found"]
    );
    env.drop_db().await;
}
