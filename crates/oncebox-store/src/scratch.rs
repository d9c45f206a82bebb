//! A database of its own for a benchmark, the demo or a test: created beside a server's
//! database, migrated, and dropped afterwards — so runs never touch real data. A
//! [`ScratchDb`] drops its database when it goes out of scope on every exit path (an error, a
//! panic), not only when [`ScratchDb::drop_db`] is called.

use std::time::Duration;

use sqlx::{Connection, PgConnection, PgPool};

use crate::StoreError;

/// A database created for one run.
#[derive(Debug)]
pub struct ScratchDb {
    admin_url: String,
    /// The database's name.
    pub name: String,
    /// A URL that points at it.
    pub url: String,
    keep: bool,
}

/// `url` with its database name replaced by `db` (query parameters kept).
pub fn with_database(url: &str, db: &str) -> String {
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

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl ScratchDb {
    /// Drops `name` if it exists on the server of `database_url`, creates it anew and, with
    /// `migrate`, applies oncebox's migrations.
    ///
    /// # Errors
    /// The server's error (the user needs CREATEDB).
    pub async fn create(
        database_url: &str,
        name: &str,
        migrate: bool,
    ) -> Result<ScratchDb, StoreError> {
        let admin_url = with_database(database_url, "postgres");
        let mut admin = PgConnection::connect(&admin_url).await?;
        for sql in [
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", quoted(name)),
            format!("CREATE DATABASE {}", quoted(name)),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&mut admin)
                .await?;
        }
        admin.close().await?;
        let db = ScratchDb {
            admin_url,
            name: name.to_owned(),
            url: with_database(database_url, name),
            keep: false,
        };
        if migrate {
            let pool = db.pool(1).await?;
            crate::migrate(&pool).await?;
            pool.close().await;
        }
        Ok(db)
    }

    /// A pool of `max` connections to the scratch database.
    ///
    /// # Errors
    /// The server's error.
    pub async fn pool(&self, max: u32) -> Result<PgPool, StoreError> {
        crate::connect(&self.url, max, Duration::from_secs(5)).await
    }

    /// Keeps the database after this run (for inspection): it is not dropped.
    pub fn keep(mut self) -> ScratchDb {
        self.keep = true;
        self
    }

    /// Drops the database now, closing whatever is still connected to it.
    ///
    /// # Errors
    /// The server's error.
    pub async fn drop_db(mut self) -> Result<(), StoreError> {
        self.keep = true; // dropped here: nothing left for Drop to do
        drop_database(&self.admin_url, &self.name).await
    }
}

async fn drop_database(admin_url: &str, name: &str) -> Result<(), StoreError> {
    let mut admin = PgConnection::connect(admin_url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        quoted(name)
    )))
    .execute(&mut admin)
    .await?;
    Ok(())
}

impl Drop for ScratchDb {
    /// Drops the database on a thread of its own with its own runtime (this may run while the
    /// caller's runtime is unwinding), waiting for it outside the caller's async workers when
    /// it runs on a multi-threaded runtime.
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let (admin_url, name) = (self.admin_url.clone(), self.name.clone());
        let run = move || {
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(drop_database(&admin_url, &name))
                    .map_err(|e| e.to_string())
            })
            .join()
        };
        let on_multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let dropped = if on_multi_thread {
            tokio::task::block_in_place(run)
        } else {
            run()
        };
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(database = %self.name, error = %e, "could not drop the scratch database")
            }
            Err(_) => {
                tracing::warn!(database = %self.name, "dropping the scratch database panicked")
            }
        }
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
