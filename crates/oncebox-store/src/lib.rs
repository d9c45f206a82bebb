//! oncebox's Postgres store: schema migrations, the journal (`oncebox.intents`), the outbox and
//! the transactional submit.
//!
//! All SQL lives in `queries/*.sql` of the `oncebox-sql` crate (re-exported as [`sql`]) and is checked at run time
//! (`query_as`), with every statement covered by a test against a real Postgres. Migrations are
//! the workspace's top-level `migrations/`, embedded at compile time. Functions that run one
//! statement take any executor (`&PgPool`, `&mut PgConnection`, a transaction), so callers need
//! no connection juggling of their own.

pub mod approvals;
pub mod breaker;
mod claim;
pub mod console;
mod error;
mod intent;
pub mod lanes;
mod lease;
mod migrate;
pub mod ops;
mod queue;
mod readiness;
mod record;
pub mod scratch;
mod settled;
mod submit;
pub mod tokens;
mod view;
mod wake;

/// Every statement the store runs, as text (the `oncebox-sql` crate).
pub use oncebox_sql as sql;

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

pub use claim::{ClaimSession, ClaimedRow, REPLAN_AFTER, TenantCursor, claim, phase_waiting};
pub use error::{StoreError, SubmitError};
pub use intent::{Intent, call_key, intent_by_key};
pub use lease::{Lease, Phase};
pub use migrate::{
    MIGRATIONS_TABLE, MIGRATOR, migrate, migrations_applied, ready, refuse_newer_schema,
};
pub use queue::{ReadyQueue, WaitingGauge, ping, ready_queue, waiting_gauges};
pub use readiness::{READY_TIMEOUT, ReadinessCheck};
pub use record::{
    Completion, Next, RecordSession, Report, defer, mark_dispatched, mark_reconciling,
    messages_later, messages_sent, record, release, renew,
};
pub use settled::{listen_for_settled, next_settlement};
pub use submit::{Intake, MissingRedactionKey, Recorded, Submitted};
pub use view::IntentView;
pub use wake::{deregister_waiting, register_waiting};

pub use oncebox_sql::{DONE_CHANNEL, OUTBOX_CHANNEL};

/// Opens a pool to `database_url` with server-side guards: statements may run at most 30 s
/// (`statement_timeout`), and a transaction left idle for 60 s is ended by the server
/// (`idle_in_transaction_session_timeout`), so a stuck client cannot hold outbox locks.
///
/// A server that refuses connections (restarting) is retried with backoff for up to
/// `acquire_timeout`; a wrong password or database fails at once.
///
/// # Errors
/// [`StoreError::Database`] when the URL is malformed or the server cannot be reached in time.
pub async fn connect(
    database_url: &str,
    max_connections: u32,
    acquire_timeout: Duration,
) -> Result<PgPool, StoreError> {
    connect_with(database_url, max_connections, acquire_timeout, &[]).await
}

/// [`connect`] for workers: their batch statements take arrays whose length a cached generic
/// plan cannot know, and the generic plan hashes whole-table scans (measured: 20 ms per record
/// batch); `plan_cache_mode = force_custom_plan` plans each batch for its real size. The
/// delivery claimer's claim alone keeps a cached plan, on a session of its own, made again
/// every second ([`ClaimSession`]).
///
/// # Errors
/// As [`connect`].
pub async fn connect_worker(
    database_url: &str,
    max_connections: u32,
    acquire_timeout: Duration,
) -> Result<PgPool, StoreError> {
    let extra = [("plan_cache_mode", "force_custom_plan")];
    connect_with(database_url, max_connections, acquire_timeout, &extra).await
}

async fn connect_with(
    database_url: &str,
    max_connections: u32,
    acquire_timeout: Duration,
    extra: &[(&str, &str)],
) -> Result<PgPool, StoreError> {
    let options: PgConnectOptions = database_url.parse()?;
    // jit = off: oncebox's statements are short, and once a table is large enough for the
    // planner's estimates to pass jit_above_cost, compiling a statement took longer than running
    // it (measured: a claim over a 1,000,000-row outbox, 146 ms of JIT for 3 ms of work, on every
    // claim, the drain falling to about 800/s).
    let mut settings = vec![
        ("statement_timeout", "30s"),
        ("idle_in_transaction_session_timeout", "60s"),
        ("jit", "off"),
    ];
    settings.extend_from_slice(extra);
    let options = options.application_name("oncebox").options(settings);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .connect_with(options)
        .await?;
    Ok(pool)
}

/// A connection taken out of `pool` for good (the pool opens another in its place), set up by
/// `setup`: the session statement of a claim or record session.
async fn session_connection(
    pool: &PgPool,
    setup: &'static str,
) -> Result<sqlx::PgConnection, sqlx::Error> {
    let mut conn = pool.acquire().await?.detach();
    sqlx::query(setup).execute(&mut conn).await?;
    Ok(conn)
}
