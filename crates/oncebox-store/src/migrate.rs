//! Schema migrations, recorded in oncebox's own history table.
//!
//! oncebox shares its database with the application whose transactions it joins, and that
//! application may well use sqlx's migrator too, which keeps its history in
//! `public._sqlx_migrations` and refuses to run when that table holds a version it does not know
//! ("previously applied but is missing"). So oncebox keeps its history in
//! [`MIGRATIONS_TABLE`] (`oncebox._sqlx_migrations`), and [`migrate`] first moves any rows that
//! earlier oncebox versions wrote into the shared table — matched by version *and* checksum, so
//! an application's rows stay where they are.

use std::sync::LazyLock;

use sqlx::PgPool;
use sqlx::migrate::Migrator;

use crate::{StoreError, sql};

/// Where oncebox records which of its migrations ran.
pub const MIGRATIONS_TABLE: &str = "oncebox._sqlx_migrations";

/// The schema migrations in `migrations/`, embedded in the binary, recorded in
/// [`MIGRATIONS_TABLE`].
pub static MIGRATOR: LazyLock<Migrator> = LazyLock::new(|| {
    let mut migrator = sqlx::migrate!("../../migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator.create_schema("oncebox");
    migrator
});

/// Serialises adoptions of the shared history between `oncebox migrate` processes (an
/// arbitrary constant: "oncebox" in ASCII).
const ADOPTION_LOCK: i64 = 0x006f_6e63_6562_6f78;

/// Applies every pending migration. Safe to run concurrently from several processes: sqlx
/// serialises them with an advisory lock. Moves oncebox's rows out of a shared
/// `_sqlx_migrations` first (see the module).
///
/// # Errors
/// [`StoreError::Migrate`] when a migration fails or the database has a migration this binary
/// does not know (a newer oncebox migrated it).
#[tracing::instrument(skip(pool), err)]
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    adopt_shared_history(pool).await?;
    refuse_newer_schema(pool).await?;
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// Refuses a database whose schema is newer than this binary (a newer oncebox migrated it):
/// this binary's statements may no longer fit. A database never migrated passes (its
/// readiness says so).
///
/// # Errors
/// [`StoreError::NewerSchema`] with both versions; the database's error.
pub async fn refuse_newer_schema(db: impl sqlx::PgExecutor<'_>) -> Result<(), StoreError> {
    let binary = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let database: Option<i64> = match sqlx::query_scalar(sql::MIGRATIONS_NEWEST)
        .fetch_one(db)
        .await
    {
        Ok(v) => v,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P01") => None,
        Err(e) => return Err(e.into()),
    };
    match database {
        Some(database) if database > binary => Err(StoreError::NewerSchema { database, binary }),
        _ => Ok(()),
    }
}

/// Moves oncebox's rows from the shared `_sqlx_migrations` (found by `search_path`) into
/// [`MIGRATIONS_TABLE`], in one transaction; returns how many moved.
async fn adopt_shared_history(pool: &PgPool) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let shared: bool = sqlx::query_scalar(sql::MIGRATIONS_LEGACY)
        .fetch_one(&mut *tx)
        .await?;
    if !shared {
        return Ok(0);
    }
    sqlx::query(sql::MIGRATIONS_LOCK)
        .bind(ADOPTION_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(sql::MIGRATIONS_HISTORY)
        .execute(&mut *tx)
        .await?;
    let (versions, checksums): (Vec<i64>, Vec<Vec<u8>>) = MIGRATOR
        .iter()
        .map(|m| (m.version, m.checksum.to_vec()))
        .unzip();
    let moved = sqlx::query(sql::MIGRATIONS_ADOPT)
        .bind(versions)
        .bind(checksums)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    if moved > 0 {
        tracing::info!(
            moved,
            table = MIGRATIONS_TABLE,
            "moved oncebox's migration history out of the shared _sqlx_migrations"
        );
    }
    Ok(moved)
}

/// How many of this binary's migrations the database has applied (by [`MIGRATIONS_TABLE`]), and
/// how many it knows: the schema is current when the first is at least the second.
///
/// # Errors
/// The database's error (for example, no migration ever ran: the table does not exist).
pub async fn migrations_applied(db: impl sqlx::PgExecutor<'_>) -> Result<(i64, i64), StoreError> {
    let versions: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
    let applied: i64 = sqlx::query_scalar(sql::MIGRATIONS_APPLIED)
        .bind(&versions)
        .fetch_one(db)
        .await?;
    Ok((applied, versions.len() as i64))
}

/// Whether the database is ready for this binary: it answers, and every migration the binary
/// knows has been applied (by oncebox's own history). `Err` is one line for a probe to answer
/// with: `migrations: …` or `database: …`.
pub async fn ready(db: impl sqlx::PgExecutor<'_>) -> Result<(), String> {
    match migrations_applied(db).await {
        Ok((applied, known)) if applied >= known => Ok(()),
        Ok((applied, known)) => Err(format!(
            "migrations: {applied} of {known} applied; run `oncebox migrate`"
        )),
        Err(StoreError::Database(sqlx::Error::Database(e)))
            if e.code().as_deref() == Some("42P01") =>
        {
            Err("migrations: none applied; run `oncebox migrate`".into())
        }
        Err(e) => Err(e.to_string()),
    }
}
