//! The schema: the typed vocabulary and its sets, migrations, and claims that are index scans.

use std::time::Duration;

use oncebox_core::{AttemptKind, ErrorCode, NewIntent, Status};
use oncebox_store::tokens::Role;
use oncebox_store::{Intake, Phase, claim};
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrations = "../../migrations")]
async fn status_check_accepts_exactly_the_core_status_set(pool: PgPool) {
    for status in Status::ALL {
        let completed = if status.is_terminal() {
            "now()"
        } else {
            "NULL"
        };
        let sql = format!(
            "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload, status, completed_at)
             VALUES ('t', $1, 'a', repeat('0', 64), '{{}}', $2, {completed})"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(status.as_str())
            .bind(status)
            .execute(&pool)
            .await
            .unwrap_or_else(|e| panic!("{status} refused: {e}"));
    }
    let bogus = sqlx::query(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload, status)
         VALUES ('t', 'x', 'a', repeat('0', 64), '{}', 'done')",
    )
    .execute(&pool)
    .await
    .expect_err("unknown status");
    assert!(
        bogus.to_string().contains("oncebox.intent_status"),
        "the status type refuses it: {bogus}"
    );
    let long_key = sqlx::query(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload)
         VALUES ('t', repeat('k', 256), 'a', repeat('0', 64), '{}')",
    )
    .execute(&pool)
    .await
    .expect_err("key over 255");
    assert!(
        long_key.to_string().contains("intents_key_length"),
        "{long_key}"
    );
    let inconsistent = sqlx::query(
        "INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload, status)
         VALUES ('t', 'y', 'a', repeat('0', 64), '{}', 'succeeded')",
    )
    .execute(&pool)
    .await
    .expect_err("terminal without completed_at");
    assert!(
        inconsistent
            .to_string()
            .contains("intents_completed_iff_terminal")
    );
}

/// The labels of the enum type `name`, in order.
async fn labels(pool: &PgPool, name: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT enumlabel::text FROM pg_enum WHERE enumtypid = to_regtype($1) ORDER BY enumsortorder",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .expect("labels")
}

#[sqlx::test(migrations = "../../migrations")]
async fn enum_types_have_exactly_the_rust_names(pool: PgPool) {
    let names = |v: Vec<&str>| v.into_iter().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        labels(&pool, "oncebox.intent_status").await,
        names(Status::ALL.iter().map(|s| s.as_str()).collect())
    );
    assert_eq!(
        labels(&pool, "oncebox.phase").await,
        names(Phase::ALL.iter().map(|p| p.as_str()).collect())
    );
    assert_eq!(
        labels(&pool, "oncebox.attempt_kind").await,
        names(AttemptKind::ALL.iter().map(|k| k.as_str()).collect())
    );
    assert_eq!(
        labels(&pool, "oncebox.error_code").await,
        names(ErrorCode::ALL.iter().map(|c| c.as_str()).collect())
    );
    assert_eq!(
        labels(&pool, "oncebox.token_role").await,
        names(Role::ALL.iter().map(|r| r.as_str()).collect())
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_sql_sets_are_the_rust_sets(pool: PgPool) {
    for status in Status::ALL {
        let sets: (bool, bool, bool, bool) = sqlx::query_as(
            "SELECT oncebox.is_terminal($1), oncebox.is_settled($1), oncebox.is_dead_letter($1), \
                    oncebox.is_retryable($1)",
        )
        .bind(status)
        .fetch_one(&pool)
        .await
        .expect("sets");
        assert_eq!(
            sets,
            (
                status.is_terminal(),
                status.is_settled(),
                status.is_dead_letter(),
                status.is_retryable()
            ),
            "{status}"
        );
        let round_trip: Status = sqlx::query_scalar("SELECT $1::oncebox.intent_status")
            .bind(status)
            .fetch_one(&pool)
            .await
            .expect("round trip");
        assert_eq!(round_trip, status);
    }
}

#[sqlx::test(migrations = false)]
async fn migrations_apply_once_and_rerun_cleanly(pool: PgPool) {
    oncebox_store::migrate(&pool).await.expect("first run");
    oncebox_store::migrate(&pool)
        .await
        .expect("second run is a no-op");
    let applied: i64 =
        sqlx::query_scalar("SELECT count(*) FROM oncebox._sqlx_migrations WHERE success")
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(applied as usize, oncebox_store::MIGRATOR.iter().count());
    let shared: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('public._sqlx_migrations')::text")
            .fetch_one(&pool)
            .await
            .expect("regclass");
    assert_eq!(
        shared, None,
        "oncebox writes nothing into the shared history"
    );
}

async fn fill(pool: &PgPool, n: usize) {
    let intake = Intake::from_actions([("a".to_owned(), vec![])], None)
        .expect("no rule hashes")
        .with_notify(false);
    let mut tx = pool.begin().await.expect("begin");
    for i in 0..n {
        intake
            .submit(
                &mut tx,
                NewIntent::new("t", format!("k{i}"), "a", json!({"i": i})),
            )
            .await
            .expect("submit");
    }
    tx.commit().await.expect("commit");
}

#[sqlx::test(migrations = "../../migrations")]
async fn claim_is_an_index_scan(pool: PgPool) {
    fill(&pool, 20_000).await;
    // A realistic hot table: most rows leased, some expired, a few done.
    sqlx::query(
        "UPDATE oncebox.outbox SET lease_owner = 'w', lease_expires_at = now() + interval '1 minute'
         WHERE intent_id % 4 = 0",
    )
    .execute(&pool)
    .await
    .expect("lease some");
    sqlx::query("ANALYZE oncebox.outbox")
        .execute(&pool)
        .await
        .expect("analyze");
    let sql = format!("EXPLAIN {}", oncebox_store::sql::CLAIM);
    let plan: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(Phase::Deliver)
        .bind("w1")
        .bind(100_i64)
        .bind(30.0_f64)
        .fetch_all(&pool)
        .await
        .expect("explain");
    let plan = plan.join("\n");
    println!("{plan}");
    assert!(
        !plan.contains("Seq Scan"),
        "claim must not scan the table:\n{plan}"
    );
    assert!(
        plan.contains("outbox_ready"),
        "ready rows come from the partial index:\n{plan}"
    );
    assert!(
        plan.contains("outbox_leased"),
        "expired leases come from their index:\n{plan}"
    );
    assert!(
        plan.contains("outbox_pkey"),
        "the update finds its rows by primary key:\n{plan}"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn one_outbox_row_per_intent_and_phase(pool: PgPool) {
    fill(&pool, 1).await;
    let dup = sqlx::query("INSERT INTO oncebox.outbox (intent_id, phase, tenant_id) SELECT intent_id, 'deliver', tenant_id FROM oncebox.outbox")
        .execute(&pool)
        .await
        .expect_err("a second delivery row for one intent");
    assert!(dup.to_string().contains("outbox_pkey"), "{dup}");
    // Written as a binary older than migration 0012 writes it, without the tenant: the journal
    // supplies it (a rolling upgrade runs old and new binaries side by side).
    sqlx::query("INSERT INTO oncebox.outbox (intent_id, phase) SELECT intent_id, 'notify' FROM oncebox.outbox")
        .execute(&pool)
        .await
        .expect("a dead-letter notification may queue beside it");
    let tenants: Vec<(String, String)> = sqlx::query_as(
        "SELECT o.tenant_id, i.tenant_id FROM oncebox.outbox o JOIN oncebox.intents i ON i.id = o.intent_id",
    )
    .fetch_all(&pool)
    .await
    .expect("tenants");
    assert_eq!(tenants.len(), 2);
    assert!(tenants.iter().all(|(o, i)| o == i), "{tenants:?}");
}

#[sqlx::test(migrations = "../../migrations")]
async fn claims_do_not_overlap_and_bump_the_epoch(pool: PgPool) {
    fill(&pool, 50).await;
    let mut c1 = pool.acquire().await.expect("conn");
    let mut c2 = pool.acquire().await.expect("conn");
    let a = claim(&mut *c1, Phase::Deliver, "w1", 30, Duration::from_secs(30))
        .await
        .expect("claim a");
    let b = claim(&mut *c2, Phase::Deliver, "w2", 30, Duration::from_secs(30))
        .await
        .expect("claim b");
    assert_eq!(a.len(), 30);
    assert_eq!(b.len(), 20);
    let mut ids: Vec<i64> = a.iter().chain(&b).map(|r| r.intent_id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 50, "no row leased twice");
    assert!(
        a.iter()
            .chain(&b)
            .all(|r| r.lease.epoch == 1 && !r.lease_taken_over)
    );
    assert!(
        claim(&mut *c1, Phase::Deliver, "w3", 10, Duration::from_secs(30))
            .await
            .expect("empty")
            .is_empty()
    );
    assert!(
        claim(
            &mut *c1,
            Phase::Reconcile,
            "w3",
            10,
            Duration::from_secs(30)
        )
        .await
        .expect("other phase")
        .is_empty()
    );

    // Expire w1's leases: a new claim takes them over with a higher epoch, flagged.
    sqlx::query("UPDATE oncebox.outbox SET lease_expires_at = now() - interval '1 second' WHERE lease_owner = 'w1'")
        .execute(&pool)
        .await
        .expect("expire");
    let c = claim(&mut *c2, Phase::Deliver, "w3", 100, Duration::from_secs(30))
        .await
        .expect("take over");
    assert_eq!(c.len(), 30);
    assert!(c.iter().all(|r| r.lease.epoch == 2 && r.lease_taken_over));
    let owners: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT lease_owner FROM oncebox.outbox ORDER BY 1")
            .fetch_all(&pool)
            .await
            .expect("owners");
    assert_eq!(owners, ["w2", "w3"]);
}
