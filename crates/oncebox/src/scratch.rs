//! A database of its own for the benchmark and the demo, created beside `DATABASE_URL`'s and
//! dropped afterwards, so they never touch real data.

use anyhow::Context;
use sqlx::{Connection, PgConnection, PgPool};

use crate::cli::DbArgs;
use crate::commands;
use crate::exit::CliError;

/// A database created for one run.
pub(crate) struct ScratchDb {
    admin_url: String,
    /// The database's name.
    pub(crate) name: String,
    /// A URL that points at it.
    pub(crate) url: String,
}

/// `url` with its database name replaced by `db` (query parameters kept).
pub(crate) fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let authority_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_end..].find('/') {
        Some(i) => &base[..authority_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

impl ScratchDb {
    /// Drops `name` if it exists, creates it anew and migrates it.
    pub(crate) async fn create(database_url: &str, name: &str) -> Result<ScratchDb, CliError> {
        let admin_url = with_database(database_url, "postgres");
        let mut admin = PgConnection::connect(&admin_url)
            .await
            .context("cannot connect to the server of DATABASE_URL (database postgres)")?;
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {quoted} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {quoted}")))
            .execute(&mut admin)
            .await
            .with_context(|| format!("cannot create database {name}: the user needs CREATEDB"))?;
        admin.close().await?;
        let db = ScratchDb {
            admin_url,
            name: name.to_owned(),
            url: with_database(database_url, name),
        };
        let pool = db.pool(1).await?;
        oncebox_store::migrate(&pool).await?;
        pool.close().await;
        Ok(db)
    }

    /// A pool of `max` connections to the scratch database.
    pub(crate) async fn pool(&self, max: u32) -> Result<PgPool, CliError> {
        commands::connect(
            &DbArgs {
                database_url: self.url.clone(),
            },
            max,
        )
        .await
    }

    /// Drops the database.
    pub(crate) async fn drop_db(self) -> Result<(), CliError> {
        let mut admin = PgConnection::connect(&self.admin_url).await?;
        let quoted = format!("\"{}\"", self.name.replace('"', "\"\""));
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {quoted} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn replaces_only_the_database() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/app", "x"),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h/app?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u@h:5432", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(with_database("postgresql://h/a/b", "x"), "postgresql://h/x");
    }
}
