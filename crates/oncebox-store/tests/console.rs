//! What the console reads, against the real Postgres: the intents that need a person, paged
//! without repeats or gaps in either order and scoped to a tenant, over the `intents_waiting`
//! index; the waiting gauges; the workers seen; sessions that a token's revocation ends.

use std::collections::BTreeSet;
use std::time::Duration;

use oncebox_core::{IntentNames, NewIntent, Status};
use oncebox_store::Intake;
use oncebox_store::console::{self, AttentionFilter, NEEDS_A_PERSON};
use oncebox_store::tokens::{NewToken, Role, create_token, revoke};
use serde_json::json;
use sqlx::PgPool;

/// Submits `key` for `tenant` and puts it in `status`, `age_s` seconds after its last change.
async fn intent_in(pool: &PgPool, tenant: &str, key: &str, status: Status, age_s: i64) -> i64 {
    let intake = Intake::from_actions([("a".to_owned(), vec![]), ("b".to_owned(), vec![])], None)
        .expect("no rule hashes")
        .with_notify(false);
    let action = if key.ends_with('b') { "b" } else { "a" };
    let mut tx = pool.begin().await.expect("begin");
    let id = intake
        .submit(
            &mut tx,
            NewIntent::new(
                IntentNames {
                    tenant_id: tenant,
                    idempotency_key: key,
                    action,
                },
                json!({"n": 1}),
            ),
        )
        .await
        .expect("submit")
        .intent
        .id;
    tx.commit().await.expect("commit");
    sqlx::query(
        "UPDATE oncebox.intents SET status = $2, attempt_count = 1, \
         updated_at = now() - make_interval(secs => $3), \
         completed_at = CASE WHEN oncebox.is_terminal($2) THEN now() END WHERE id = $1",
    )
    .bind(id)
    .bind(status)
    .bind(age_s as f64)
    .execute(pool)
    .await
    .expect("status");
    id
}

fn filter(tenant: &str, newest_first: bool) -> AttentionFilter {
    AttentionFilter {
        tenant_id: tenant.to_owned(),
        statuses: NEEDS_A_PERSON.to_vec(),
        actions: None,
        older_than: None,
        newest_first,
        after: None,
        limit: 7,
    }
}

#[sqlx::test(migrations = "../../migrations")]
async fn needs_a_person_pages_without_repeats_in_both_orders_and_in_its_tenant(pool: PgPool) {
    let statuses = [
        Status::NeedsReview,
        Status::Unknown,
        Status::Failed,
        Status::Expired,
    ];
    let mut want = BTreeSet::new();
    for i in 0..24 {
        // Some share an updated_at (ties are broken by id).
        let key = format!("k{i:02}{}", if i % 5 == 0 { "b" } else { "" });
        let id = intent_in(&pool, "t", &key, statuses[i % 4], (i / 2) as i64 * 60).await;
        want.insert(id);
    }
    // Not listed: succeeded, pending, another tenant's.
    intent_in(&pool, "t", "ok", Status::Succeeded, 10).await;
    intent_in(&pool, "t", "waiting", Status::Pending, 10).await;
    intent_in(&pool, "other", "theirs", Status::NeedsReview, 10).await;

    for newest_first in [true, false] {
        let mut f = filter("t", newest_first);
        let mut seen = Vec::new();
        loop {
            let page = console::attention(&pool, &f).await.expect("page");
            if page.is_empty() {
                break;
            }
            let last = page.last().expect("a last row");
            f.after = Some((last.updated_at, last.id));
            seen.extend(page.iter().map(|i| (i.updated_at, i.id)));
        }
        let ids: BTreeSet<i64> = seen.iter().map(|(_, id)| *id).collect();
        assert_eq!(ids, want, "every intent once (newest_first {newest_first})");
        assert_eq!(ids.len(), seen.len(), "no repeats");
        let mut sorted = seen.clone();
        sorted.sort();
        if newest_first {
            sorted.reverse();
        }
        assert_eq!(seen, sorted, "in order (newest_first {newest_first})");
    }

    // Filters: one status, one action, an age.
    let mut f = filter("t", true);
    f.limit = 100;
    f.statuses = vec![Status::NeedsReview];
    let page = console::attention(&pool, &f).await.expect("page");
    assert_eq!(page.len(), 6);
    assert!(page.iter().all(|i| i.status == Status::NeedsReview));
    f.statuses = NEEDS_A_PERSON.to_vec();
    f.actions = Some(vec!["b".to_owned()]);
    let page = console::attention(&pool, &f).await.expect("page");
    assert_eq!(page.len(), 5, "{page:?}");
    f.actions = None;
    f.older_than = Some(Duration::from_secs(10 * 60 + 30));
    let page = console::attention(&pool, &f).await.expect("page");
    assert_eq!(
        page.len(),
        2,
        "changed over 10.5 min ago: ages 11 min (two)"
    );

    // On a journal where the tenant has many intents that needed no one, the plan reads the
    // partial index rather than all of the tenant's intents.
    sqlx::query(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload, \
         status, completed_at) SELECT 't', 'bulk-' || g, 'a', repeat('0', 64), '{}', \
         'succeeded', now() FROM generate_series(1, 20000) g",
    )
    .execute(&pool)
    .await
    .expect("bulk");
    sqlx::query("ANALYZE oncebox.intents")
        .execute(&pool)
        .await
        .expect("analyze");
    let sql = oncebox_store::sql::CONSOLE_ATTENTION
        .lines()
        .filter(|l| !l.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("$1", "'t'")
        .replace("$2::text[]", "ARRAY['needs_review']")
        .replace("$3::text[]", "NULL::text[]")
        .replace("$3", "NULL::text[]")
        .replace("$4::float8", "NULL::float8")
        .replace("$4", "NULL")
        .replace("$5::timestamptz", "NULL::timestamptz")
        .replace("$5", "NULL::timestamptz")
        .replace("$6", "0")
        .replace("$7", "true")
        .replace("$8", "50");
    let plan: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
        .fetch_all(&pool)
        .await
        .expect("explain");
    let plan: String = plan
        .into_iter()
        .map(|(l,)| l)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(plan.contains("intents_waiting"), "{plan}");

    // The gauges: per waiting status, and the dead letters (none: no notify rows here).
    let gauges = oncebox_store::waiting_gauges(&pool).await.expect("gauges");
    let of = |g: &str| gauges.iter().find(|x| x.gauge == g).map(|x| x.n);
    assert_eq!(
        of("needs_review"),
        Some(7),
        "six of t's and the other tenant's"
    );
    assert_eq!(of("unknown"), Some(6));
    assert_eq!(of("dead_letter"), Some(0));
    let review = gauges
        .iter()
        .find(|x| x.gauge == "needs_review")
        .expect("needs_review");
    assert!(review.oldest_seconds >= 600.0, "{review:?}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn sessions_end_with_logout_or_their_token_and_workers_are_listed(pool: PgPool) {
    let (token_id, _) = create_token(&pool, NewToken::new("t", Role::Ops))
        .await
        .expect("token");
    let caller = oncebox_store::tokens::Caller {
        id: token_id,
        tenant_id: "t".into(),
        role: Role::Ops,
        expires_at: None,
        label: None,
        holder: None,
    };
    let (id, csrf) = console::create_session(&pool, &caller, Duration::from_secs(60))
        .await
        .expect("session");
    let found = console::session(&pool, &id).await.expect("find");
    assert_eq!(
        found
            .as_ref()
            .map(|s| (&s.principal, &s.tenant_id, s.token_id)),
        Some((&caller.principal(), &caller.tenant_id, Some(token_id)))
    );
    assert_eq!(found.map(|s| s.csrf), Some(csrf));
    assert!(
        console::session(&pool, "not-a-session")
            .await
            .expect("find")
            .is_none()
    );
    let stored: Vec<(String,)> = sqlx::query_as("SELECT id_hash FROM oncebox.console_sessions")
        .fetch_all(&pool)
        .await
        .expect("rows");
    assert!(
        stored.iter().all(|(h,)| *h != id),
        "the id itself is never stored"
    );
    // Logout ends it.
    console::end_session(&pool, &id).await.expect("logout");
    assert!(console::session(&pool, &id).await.expect("find").is_none());
    // A revoked token ends every session it opened.
    let (id, _) = console::create_session(&pool, &caller, Duration::from_secs(60))
        .await
        .expect("session");
    revoke(&pool, oncebox_store::tokens::Revoke::Id(token_id))
        .await
        .expect("revoke");
    assert!(console::session(&pool, &id).await.expect("find").is_none());

    let seen = |w: &'static str, delivers: bool| console::worker_seen(&pool, w, delivers);
    assert_eq!(seen("w1", true).await.expect("seen"), 1, "w1 counts itself");
    assert_eq!(
        seen("w2", false).await.expect("seen"),
        1,
        "w2 does not deliver"
    );
    assert_eq!(
        seen("w3", true).await.expect("seen"),
        2,
        "w1 and w3 deliver"
    );
    assert_eq!(seen("w1", true).await.expect("seen again"), 2, "w1 once");
    let workers = console::workers(&pool).await.expect("workers");
    let names: Vec<&str> = workers.iter().map(|w| w.worker.as_str()).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(workers.iter().all(|w| w.seen_seconds_ago < 60.0));
    assert_eq!(
        workers
            .iter()
            .find(|w| w.worker == "w2")
            .map(|w| w.delivers),
        Some(false)
    );
}
