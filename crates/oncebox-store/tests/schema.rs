//! The schema: the typed vocabulary and its sets, migrations, and claims that are index scans.

use std::time::Duration;

use oncebox_core::{AttemptKind, ErrorCode, IntentNames, NewIntent, Status};
use oncebox_store::tokens::Role;
use oncebox_store::{Intake, Phase, TenantCursor, claim};
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

/// The database's lane release (`oncebox.lane_advance`) follows `protocol::releases_lane`, the
/// rule the protocol's model checks.
#[sqlx::test(migrations = "../../migrations")]
async fn a_lane_is_released_by_the_statuses_the_protocol_names(pool: PgPool) {
    for skip_failed in [false, true] {
        for status in Status::ALL {
            let lane: i64 = sqlx::query_scalar(
                "INSERT INTO oncebox.lanes (tenant_id, destination, ordering_key, last_seq, skip_failed) \
                 VALUES ('t', 'd', $1, 2, $2) RETURNING id",
            )
            .bind(format!("{status}-{skip_failed}"))
            .bind(skip_failed)
            .fetch_one(&pool)
            .await
            .expect("lane");
            let moved: Option<i64> =
                sqlx::query_scalar("SELECT oncebox.lane_advance($1, 1, $2, false)")
                    .bind(lane)
                    .bind(status)
                    .fetch_one(&pool)
                    .await
                    .expect("advance");
            assert_eq!(
                moved.is_some(),
                oncebox_core::protocol::releases_lane(status, skip_failed),
                "{status}, skip_failed {skip_failed}"
            );
        }
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
                NewIntent::new(
                    IntentNames {
                        tenant_id: "t",
                        idempotency_key: &format!("k{i}"),
                        action: "a",
                    },
                    json!({"i": i}),
                ),
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
        .bind("")
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

/// One claim with a lease of 30 s and a fresh cursor (the claims of these tests are not rounds).
async fn claim_once(
    conn: &mut sqlx::PgConnection,
    phase: Phase,
    worker: &str,
    limit: i64,
) -> Result<Vec<oncebox_store::ClaimedRow>, sqlx::Error> {
    let lease = Duration::from_secs(30);
    claim(
        conn,
        phase,
        worker,
        limit,
        lease,
        &mut TenantCursor::default(),
    )
    .await
}

#[sqlx::test(migrations = "../../migrations")]
async fn claims_do_not_overlap_and_bump_the_epoch(pool: PgPool) {
    fill(&pool, 50).await;
    let mut c1 = pool.acquire().await.expect("conn");
    let mut c2 = pool.acquire().await.expect("conn");
    let a = claim_once(&mut c1, Phase::Deliver, "w1", 30)
        .await
        .expect("claim a");
    let b = claim_once(&mut c2, Phase::Deliver, "w2", 30)
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
        claim_once(&mut c1, Phase::Deliver, "w3", 10)
            .await
            .expect("empty")
            .is_empty()
    );
    assert!(
        claim_once(&mut c1, Phase::Reconcile, "w3", 10)
            .await
            .expect("other phase")
            .is_empty()
    );

    // Expire w1's leases: a new claim takes them over with a higher epoch, flagged.
    sqlx::query("UPDATE oncebox.outbox SET lease_expires_at = now() - interval '1 second' WHERE lease_owner = 'w1'")
        .execute(&pool)
        .await
        .expect("expire");
    let c = claim_once(&mut c2, Phase::Deliver, "w3", 100)
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

/// `tenants` tenants with `per_tenant` ready deliveries each, written directly.
async fn fill_tenants(pool: &PgPool, tenants: i32, per_tenant: i32) {
    sqlx::query(
        "WITH i AS (INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, \
         request_hash, payload) SELECT 't-' || lpad((g % $1)::text, 6, '0'), 'k-' || g, \
         'create_invoice', repeat('0', 64), '{}'::jsonb FROM generate_series(1, $1 * $2) g \
         RETURNING id, tenant_id) \
         INSERT INTO oncebox.outbox (intent_id, phase, tenant_id) \
         SELECT id, 'deliver', tenant_id FROM i",
    )
    .bind(tenants)
    .bind(per_tenant)
    .execute(pool)
    .await
    .expect("fill");
    sqlx::query("ANALYZE oncebox.outbox")
        .execute(pool)
        .await
        .expect("analyze");
}

/// The claim's cost does not grow with the tenants that have work: at 2,000 tenants a claim of
/// 10 visits 10 of them (its recursive scan yields at most one row per tenant visited), not all
/// 2,000.
#[sqlx::test(migrations = "../../migrations")]
async fn a_claim_visits_a_bounded_number_of_tenants(pool: PgPool) {
    fill_tenants(&pool, 2_000, 2).await;
    let sql = format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        oncebox_store::sql::CLAIM
    );
    let mut tx = pool.begin().await.expect("begin");
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(Phase::Deliver)
        .bind("w1")
        .bind(10_i64)
        .bind(30.0_f64)
        .bind("t-000500")
        .fetch_one(&mut *tx)
        .await
        .expect("explain analyze");
    tx.rollback().await.expect("rollback");
    fn recursive_rows(node: &serde_json::Value, out: &mut Vec<u64>) {
        if node["Node Type"] == "Recursive Union" {
            out.push(node["Actual Rows"].as_f64().unwrap_or(f64::MAX) as u64);
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            recursive_rows(child, out);
        }
    }
    let mut visited = Vec::new();
    recursive_rows(&plan[0]["Plan"], &mut visited);
    assert_eq!(
        visited.len(),
        1,
        "one recursive scan of the tenants: {plan}"
    );
    assert!(
        visited[0] <= 10,
        "a claim of 10 visited {} tenants of 2,000",
        visited[0]
    );
}

/// Successive claims go round the tenants from where the last one stopped: at 300 tenants with
/// ready work, claims of 10 give each tenant exactly one row in 30 claims, then start again.
#[sqlx::test(migrations = "../../migrations")]
async fn claims_go_round_the_tenants(pool: PgPool) {
    fill_tenants(&pool, 300, 3).await;
    let mut cursor = TenantCursor::default();
    let mut turns: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    for _ in 0..30 {
        let rows = claim(
            &pool,
            Phase::Deliver,
            "w1",
            10,
            Duration::from_secs(30),
            &mut cursor,
        )
        .await
        .expect("claim");
        assert_eq!(rows.len(), 10);
        for r in rows {
            *turns.entry(r.tenant_id).or_default() += 1;
        }
    }
    assert_eq!(turns.len(), 300, "every tenant had a turn");
    assert!(turns.values().all(|&n| n == 1), "one row each: {turns:?}");
    assert_eq!(
        cursor.tenant(),
        "t-000299",
        "the cursor is where the round ended"
    );
    let next = claim(
        &pool,
        Phase::Deliver,
        "w1",
        10,
        Duration::from_secs(30),
        &mut cursor,
    )
    .await
    .expect("claim");
    let mut tenants: Vec<String> = next.into_iter().map(|r| r.tenant_id).collect();
    tenants.sort();
    let first: Vec<String> = (0..10).map(|i| format!("t-{i:06}")).collect();
    assert_eq!(
        tenants, first,
        "the next round starts from the first tenant"
    );
}

/// oncebox's connections compile no statement with JIT: on a large outbox the planner's
/// estimates passed `jit_above_cost` and compiling the claim took fifty times its work.
#[tokio::test]
async fn connections_run_without_jit() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    for pool in [
        oncebox_store::connect(&url, 1, Duration::from_secs(5))
            .await
            .expect("connect"),
        oncebox_store::connect_worker(&url, 1, Duration::from_secs(5))
            .await
            .expect("connect_worker"),
    ] {
        let jit: String = sqlx::query_scalar("SHOW jit")
            .fetch_one(&pool)
            .await
            .expect("show jit");
        assert_eq!(jit, "off");
    }
}
