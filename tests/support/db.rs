//! A database of the test's own, dropped when the guard is.

use oncebox_store::scratch::ScratchDb;

/// `DATABASE_URL` (or the local default) with its database replaced by `db`.
pub(crate) fn url_for(db: &str) -> String {
    let base = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    oncebox_store::scratch::with_database(base.split('?').next().unwrap_or_default(), db)
}

/// A database of one test's own (`oncebox_<kind>_<test>_<pid>`), created empty or migrated;
/// dropped when this guard is dropped, whether the test passed, failed or panicked.
pub(crate) struct TestDb {
    scratch: ScratchDb,
}

impl TestDb {
    /// Creates the database (dropping a leftover of an earlier run first).
    pub(crate) async fn new(kind: &str, test: &str, migrate: bool) -> TestDb {
        let name = format!("oncebox_{kind}_{test}_{}", std::process::id());
        let scratch = ScratchDb::create(&url_for("postgres"), &name, migrate)
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        TestDb { scratch }
    }

    /// The database's name.
    pub(crate) fn name(&self) -> &str {
        &self.scratch.name
    }

    /// Its URL.
    pub(crate) fn url(&self) -> &str {
        &self.scratch.url
    }

    /// A pool of `max` connections to it.
    pub(crate) async fn pool(&self, max: u32) -> sqlx::PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(max)
            .connect(self.url())
            .await
            .expect("pool")
    }

    /// Drops it now (the guard would do it anyway).
    pub(crate) async fn drop_db(self) {
        self.scratch
            .drop_db()
            .await
            .expect("drop the test database");
    }
}

/// An application's own sqlx migrator with `n` migrations (versions 1..=n, each a table
/// `app_<v>`), recording its history where sqlx does by default, `public._sqlx_migrations` — the
/// neighbour oncebox must share a database with.
pub(crate) fn app_migrator(n: i64) -> sqlx::migrate::Migrator {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    Migrator::with_migrations(
        (1..=n)
            .map(|v| {
                Migration::new(
                    v,
                    format!("app table {v}").into(),
                    MigrationType::Simple,
                    sqlx::AssertSqlSafe(format!("CREATE TABLE app_{v} (id bigint)")).into_sql_str(),
                    false,
                )
            })
            .collect(),
    )
}
