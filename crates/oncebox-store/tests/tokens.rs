//! API tokens against the real Postgres: lifetimes, labels, last use without a write per
//! request, and a listing that never shows the secret.

use std::time::Duration;

use oncebox_store::tokens::{self, NewToken, Revoke, Role};
use sqlx::PgPool;

/// The row's `xmin`: it changes exactly when the row is written.
async fn version(pool: &PgPool, id: i64) -> String {
    sqlx::query_scalar("SELECT xmin::text FROM oncebox.api_tokens WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("xmin")
}

#[sqlx::test(migrations = "../../migrations")]
async fn last_use_is_recorded_at_most_once_a_minute(pool: PgPool) {
    let (id, token) = tokens::create_token(
        &pool,
        NewToken {
            label: Some("ci"),
            ..NewToken::new("t", Role::Agent)
        },
    )
    .await
    .expect("create");
    let never = tokens::list(&pool, None, false).await.expect("list");
    assert_eq!(never[0].last_used_at, None);
    let who = tokens::authenticate(&pool, &token)
        .await
        .expect("auth")
        .expect("live");
    assert_eq!((who.id, who.tenant_id.as_str()), (id, "t"));
    let used = version(&pool, id).await;
    for _ in 0..20 {
        tokens::authenticate(&pool, &token)
            .await
            .expect("auth")
            .expect("live");
    }
    assert_eq!(
        version(&pool, id).await,
        used,
        "no write per authentication"
    );
    let listed = tokens::list(&pool, None, false).await.expect("list");
    assert!(listed[0].last_used_at.is_some());
    // A minute later, the next authentication records the use again.
    sqlx::query("UPDATE oncebox.api_tokens SET last_used_at = now() - interval '61 seconds'")
        .execute(&pool)
        .await
        .expect("age");
    let aged = version(&pool, id).await;
    tokens::authenticate(&pool, &token)
        .await
        .expect("auth")
        .expect("live");
    assert_ne!(version(&pool, id).await, aged);
}

#[sqlx::test(migrations = "../../migrations")]
async fn tokens_expire_and_are_revoked_by_token_id_or_label(pool: PgPool) {
    let create = |label: &'static str, lifetime: Option<Duration>| {
        let pool = pool.clone();
        async move {
            tokens::create_token(
                &pool,
                NewToken {
                    label: Some(label),
                    lifetime,
                    ..NewToken::new("t", Role::Ops)
                },
            )
            .await
            .expect("create")
        }
    };
    let (short_id, short) = create("short", Some(Duration::from_secs(3600))).await;
    let who = tokens::authenticate(&pool, &short)
        .await
        .expect("auth")
        .expect("live for now");
    let left = who.expires_at.expect("an expiry") - chrono::Utc::now();
    assert!(
        (3590..=3600).contains(&left.num_seconds()),
        "expires in an hour: {left}"
    );
    // The hour has passed.
    sqlx::query(
        "UPDATE oncebox.api_tokens SET expires_at = now() - interval '1 second' WHERE id = $1",
    )
    .bind(short_id)
    .execute(&pool)
    .await
    .expect("age");
    assert_eq!(
        tokens::authenticate(&pool, &short).await.expect("auth"),
        None,
        "expired"
    );

    let (by_token, secret) = create("a", None).await;
    let (by_id, _) = create("b", None).await;
    let (rotated_1, _) = create("rotating", None).await;
    let (rotated_2, _) = create("rotating", None).await;
    assert_eq!(
        tokens::revoke(&pool, Revoke::Token(&secret))
            .await
            .expect("revoke"),
        [by_token]
    );
    assert_eq!(
        tokens::revoke(&pool, Revoke::Id(by_id))
            .await
            .expect("revoke"),
        [by_id]
    );
    let mut both = tokens::revoke(&pool, Revoke::Label("rotating"))
        .await
        .expect("revoke");
    both.sort_unstable();
    assert_eq!(both, [rotated_1, rotated_2]);
    assert!(
        tokens::revoke(&pool, Revoke::Label("rotating"))
            .await
            .expect("again")
            .is_empty(),
        "nothing live is left to revoke"
    );
    assert!(
        tokens::list(&pool, None, false)
            .await
            .expect("live")
            .is_empty()
    );
    let all = tokens::list(&pool, Some("t"), true).await.expect("all");
    assert_eq!(all.len(), 5);
    let shown = serde_json::to_string(&all).expect("json");
    assert!(
        !shown.contains(&secret) && !shown.contains(&hex_sha256(&secret)),
        "a listing never shows a token or its hash: {shown}"
    );
}

fn hex_sha256(token: &str) -> String {
    tokens::digest(token)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
