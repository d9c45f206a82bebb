//! Cached plans are not kept once the tables have grown: a plan made while the outbox was empty
//! (a worker started on a quiet or new database) scans the whole outbox on every claim, so the
//! claim session plans its claim again once the plan is old, between claims when idle; and the
//! journal's lookup by key, prepared by a client on an empty journal, is planned on every call.
//! And a record, of successes or of any other outcome, reads only its own rows, whatever the
//! statistics say of how many rows are leased; so does a record session's cached plan of a
//! record of successes, made while the tables were empty.

use std::time::Duration;

use oncebox_store::{
    ClaimSession, Completion, Lease, Phase, RecordSession, TenantCursor, intent_by_key,
};
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};

mod common;

/// Intents `from + 1 ..= to` with their deliver-phase outbox rows, written as `submit.sql`
/// writes them (the intake is not what is measured here).
async fn fill(conn: &mut PgConnection, from: i64, to: i64) {
    sqlx::query(
        "WITH i AS (
             INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload)
             SELECT 't', 'k-' || g, 'a', repeat('0', 64), '{\"n\": 1}'
             FROM generate_series($1::bigint + 1, $2::bigint) g
             RETURNING id, tenant_id)
         INSERT INTO oncebox.outbox (intent_id, phase, tenant_id)
         SELECT id, 'deliver', tenant_id FROM i",
    )
    .bind(from)
    .bind(to)
    .execute(&mut *conn)
    .await
    .expect("fill");
}

/// Sequential scans of the outbox so far, as the statistics collector counts them once this
/// session's counts are flushed.
async fn outbox_scans(conn: &mut PgConnection) -> i64 {
    scans(conn, "outbox").await
}

/// Sequential scans of `oncebox.{table}` so far, as the statistics collector counts them once
/// this session's counts are flushed.
async fn scans(conn: &mut PgConnection, table: &str) -> i64 {
    counted(
        conn,
        "SELECT seq_scan FROM pg_stat_user_tables
         WHERE schemaname = 'oncebox' AND relname = $1",
        table,
    )
    .await
}

/// A statistics counter (`sql`, one row of one number, for `name`) once this session's counts
/// are flushed.
async fn counted(conn: &mut PgConnection, sql: &'static str, name: &str) -> i64 {
    // Flushed when the session goes idle after this statement, before it answers.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .expect("flush");
    sqlx::query_scalar(sql)
        .bind(name)
        .fetch_one(&mut *conn)
        .await
        .expect("statistics")
}

async fn claim(session: &mut ClaimSession, n: i64) -> usize {
    session
        .claim(
            Phase::Deliver,
            "w",
            n,
            Duration::from_secs(30),
            &mut TenantCursor::default(),
        )
        .await
        .expect("claim")
        .len()
}

/// A plan age that no step of these tests reaches, however slow the machine: a test makes a
/// plan due by giving its session an age of zero, never by waiting.
const NEVER_DUE: Duration = Duration::from_secs(3600);

/// A claim session whose plan was made and cached on an empty outbox (statistics taken on empty
/// tables) and is not yet due to be made again ([`NEVER_DUE`]); with another connection for the
/// test's own statements.
async fn planned_on_an_empty_outbox(pool: &PgPool) -> (ClaimSession, PoolConnection<Postgres>) {
    let mut other = pool.acquire().await.expect("conn");
    sqlx::query("VACUUM ANALYZE oncebox.outbox, oncebox.intents")
        .execute(&mut *other)
        .await
        .expect("analyze");
    let mut session = ClaimSession::open(pool)
        .await
        .expect("session")
        .replan_after(NEVER_DUE);
    assert_eq!(claim(&mut session, 100).await, 0);
    (session, other)
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_claim_plan_made_on_an_empty_outbox_is_made_again(pool: PgPool) {
    let (mut session, mut other) = planned_on_an_empty_outbox(&pool).await;

    fill(&mut other, 0, 20_000).await;
    let before = outbox_scans(session.connection()).await;
    assert_eq!(claim(&mut session, 100).await, 100);
    let stale = outbox_scans(session.connection()).await;
    // The premise: the plan made on the empty outbox reads all of it (sequential scans).
    assert!(
        stale > before,
        "the empty-outbox plan did not scan the outbox"
    );

    // Once the plan is as old as the session's age (here at once), the next claim plans again,
    // for the outbox as it is now.
    let mut session = session.replan_after(Duration::ZERO);
    assert_eq!(claim(&mut session, 100).await, 100);
    let replanned = outbox_scans(session.connection()).await;
    assert_eq!(
        replanned, stale,
        "the claim planned again still scans the outbox"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn an_idle_claimer_plans_again_before_work_arrives(pool: PgPool) {
    let (mut session, mut other) = planned_on_an_empty_outbox(&pool).await;
    let lease = Duration::from_secs(30);

    fill(&mut other, 0, 20_000).await;
    // Younger than half its age: kept.
    session
        .replan_if_old(Phase::Deliver, "w", lease)
        .await
        .expect("kept");
    let before = outbox_scans(session.connection()).await;
    assert_eq!(claim(&mut session, 100).await, 100);
    let stale = outbox_scans(session.connection()).await;
    assert!(
        stale > before,
        "the empty-outbox plan did not scan the outbox"
    );

    // Half its age (here an age of zero): the idle claimer plans again, and claims nothing
    // doing so.
    let mut session = session.replan_after(Duration::ZERO);
    session
        .replan_if_old(Phase::Deliver, "w", lease)
        .await
        .expect("replanned");
    let leased: i64 =
        sqlx::query_scalar("SELECT count(*) FROM oncebox.outbox WHERE lease_owner IS NOT NULL")
            .fetch_one(&mut *other)
            .await
            .expect("leased");
    assert_eq!(leased, 100, "planning again claimed rows");
    // The claim that finds work runs the new plan (with the age back, it plans nothing itself).
    let mut session = session.replan_after(NEVER_DUE);
    let before = outbox_scans(session.connection()).await;
    assert_eq!(claim(&mut session, 100).await, 100);
    let after = outbox_scans(session.connection()).await;
    assert_eq!(
        after, before,
        "the claim after planning again still scans the outbox"
    );
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_key_lookup_prepared_on_an_empty_journal_reads_the_index_once_it_has_grown(pool: PgPool) {
    let mut conn = pool.acquire().await.expect("conn");
    sqlx::query("VACUUM ANALYZE oncebox.outbox, oncebox.intents")
        .execute(&mut *conn)
        .await
        .expect("analyze");
    // Past the five runs after which the server may keep a generic plan of a prepared statement.
    for _ in 0..8 {
        let none = intent_by_key(&mut *conn, "t", "k-1").await.expect("lookup");
        assert!(none.is_none());
    }
    fill(&mut conn, 0, 20_000).await;
    let before = scans(&mut conn, "intents").await;
    let found = intent_by_key(&mut *conn, "t", "k-12345")
        .await
        .expect("lookup")
        .expect("the intent");
    assert_eq!(found.idempotency_key, "k-12345");
    let after = scans(&mut conn, "intents").await;
    assert_eq!(after, before, "the lookup scanned the whole journal");
}

/// Entries read so far through the index `oncebox.{index}`, as the statistics collector counts
/// them once this session's counts are flushed.
async fn index_reads(conn: &mut PgConnection, index: &str) -> i64 {
    counted(
        conn,
        "SELECT idx_tup_read FROM pg_stat_user_indexes
         WHERE schemaname = 'oncebox' AND indexrelname = $1",
        index,
    )
    .await
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_record_of_retries_reads_only_its_own_rows_however_many_are_leased(pool: PgPool) {
    let mut conn = pool.acquire().await.expect("conn");
    let leased = all_leased(&mut conn, 3_000).await;
    // Outcomes that are not plain successes take the general statement, record.sql.
    let batch: Vec<Completion> = leased[..200].iter().map(|&l| common::retried(l)).collect();
    records_reading_only_its_own_rows(&mut conn, &batch).await;
    let unleased: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM oncebox.outbox WHERE lease_owner IS NULL AND attempt = 1",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("count");
    assert_eq!(
        unleased, 200,
        "each retried row is given back for its next attempt"
    );
}

/// Records `batch` (of leases held by worker `w`) and checks that the whole batch was written
/// reading none of the other leased rows, each of its intents once, and scanning neither the
/// outbox nor the journal.
async fn records_reading_only_its_own_rows(conn: &mut PgConnection, batch: &[Completion]) {
    let (reads, journal_reads, outbox_scans, intents_scans) = (
        index_reads(conn, "outbox_leased").await,
        index_reads(conn, "intents_pkey").await,
        scans(conn, "outbox").await,
        scans(conn, "intents").await,
    );
    let recorded = oncebox_store::record(&mut *conn, "w", batch)
        .await
        .expect("record");
    assert_eq!(recorded.len(), batch.len(), "the whole batch is written");
    assert_eq!(
        index_reads(conn, "outbox_leased").await - reads,
        0,
        "the fence looks up its rows by key, not through every leased row"
    );
    assert_eq!(
        index_reads(conn, "intents_pkey").await - journal_reads,
        batch.len() as i64,
        "the journal update reads each intent once"
    );
    assert_eq!(
        scans(conn, "outbox").await,
        outbox_scans,
        "no scan of the outbox"
    );
    assert_eq!(
        scans(conn, "intents").await,
        intents_scans,
        "no scan of the journal"
    );
}

/// `n` intents written with statistics taken while nothing was leased, as after a backlog was
/// written, then all of them leased to worker `w`, as a fleet of workers with thousands of
/// calls under way holds them; the session then plans each statement on each call, as the
/// worker's pool does. Returns the leases.
async fn all_leased(conn: &mut PgConnection, n: i64) -> Vec<Lease> {
    fill(conn, 0, n).await;
    sqlx::query("VACUUM ANALYZE oncebox.outbox, oncebox.intents")
        .execute(&mut *conn)
        .await
        .expect("analyze");
    let leased = lease_all(conn, n).await;
    sqlx::query("SET plan_cache_mode = force_custom_plan")
        .execute(&mut *conn)
        .await
        .expect("set");
    leased
}

/// Claims every deliver row, `n` of them, for worker `w`; returns the leases.
async fn lease_all(conn: &mut PgConnection, n: i64) -> Vec<Lease> {
    let mut leased = Vec::new();
    loop {
        let rows = oncebox_store::claim(
            &mut *conn,
            Phase::Deliver,
            "w",
            1_000,
            Duration::from_secs(60),
            &mut TenantCursor::default(),
        )
        .await
        .expect("claim");
        if rows.is_empty() {
            break;
        }
        leased.extend(rows.into_iter().map(|r| r.lease));
    }
    assert_eq!(leased.len() as i64, n);
    leased
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_record_reads_only_its_own_rows_however_many_are_leased(pool: PgPool) {
    let mut conn = pool.acquire().await.expect("conn");
    let leased = all_leased(&mut conn, 3_000).await;
    let batch: Vec<Completion> = leased[..200]
        .iter()
        .map(|&l| common::succeeded(l, "w"))
        .collect();
    records_reading_only_its_own_rows(&mut conn, &batch).await;
}

#[sqlx::test(migrations = "../../migrations")]
async fn a_record_session_plan_made_on_empty_tables_reads_only_its_own_rows(pool: PgPool) {
    let mut conn = pool.acquire().await.expect("conn");
    sqlx::query("VACUUM ANALYZE oncebox.outbox, oncebox.intents")
        .execute(&mut *conn)
        .await
        .expect("analyze");
    // The session's plan is made on its first record, an empty batch, while the statistics
    // say the tables are empty, and kept.
    let mut session = RecordSession::open(&pool).await.expect("session");
    assert!(session.record("w", &[]).await.expect("record").is_empty());
    let plan = cached_record_plan(session.connection()).await;
    for node in ["Seq Scan", "Nested Loop"] {
        assert!(!plan.contains(node), "the cached plan has a {node}: {plan}");
    }

    // The backlog is written and leased after the plan was made, with no statistics taken
    // since (taking them would make the session plan again).
    fill(&mut conn, 0, 3_000).await;
    let leased = lease_all(&mut conn, 3_000).await;
    let batch: Vec<Completion> = leased[..300]
        .iter()
        .map(|&l| common::succeeded(l, "w"))
        .collect();
    let (outbox_reads, journal_reads, outbox_scans, intents_scans) = (
        index_reads(&mut conn, "outbox_pkey").await,
        index_reads(&mut conn, "intents_pkey").await,
        scans(&mut conn, "outbox").await,
        scans(&mut conn, "intents").await,
    );
    let written = session.record("w", &batch).await.expect("record");
    assert_eq!(written.len(), batch.len(), "the whole batch is written");
    // The session's counts, flushed when it goes idle after this statement.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(session.connection())
        .await
        .expect("flush");
    assert_eq!(
        cached_record_plan(session.connection()).await,
        plan,
        "the record ran the plan made on empty tables"
    );
    // Two index entries per row: the row as claimed, and as it was before the claim (not yet
    // vacuumed away) — and none of the other 2,700 leased rows.
    assert_eq!(
        index_reads(&mut conn, "outbox_pkey").await - outbox_reads,
        2 * batch.len() as i64,
        "the fence reads each outcome's row by key"
    );
    assert_eq!(
        index_reads(&mut conn, "intents_pkey").await - journal_reads,
        batch.len() as i64,
        "the journal update reads each intent once"
    );
    assert_eq!(
        (
            scans(&mut conn, "outbox").await,
            scans(&mut conn, "intents").await
        ),
        (outbox_scans, intents_scans),
        "no scan of the outbox or the journal"
    );
}

/// The plan the session on `conn` keeps for record_succeeded.sql (its statement prepared by
/// sqlx, found by its text), as EXPLAIN shows it: the cached generic plan, whatever the
/// parameters.
async fn cached_record_plan(conn: &mut PgConnection) -> String {
    let name: String = sqlx::query_scalar(
        "SELECT name FROM pg_prepared_statements
         WHERE statement LIKE '%INSERT INTO oncebox.attempts%' AND statement LIKE '%DELETE%'
           AND statement NOT LIKE '%pg_prepared_statements%'",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("the record statement is prepared");
    // A name sqlx chose (`sqlx_s_N`), checked before it is written into the statement.
    assert!(
        name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "statement name {name:?}"
    );
    let arrays = ["'{}'"; 8].join(", ");
    let rows: Vec<String> = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "EXPLAIN (COSTS OFF) EXECUTE {name}({arrays}, 'w', 'c')"
    )))
    .fetch_all(&mut *conn)
    .await
    .expect("explain")
    .iter()
    .map(|r| sqlx::Row::get(r, 0))
    .collect();
    rows.join("\n")
}
