//! Helpers shared by the end-to-end test files. Each file uses a subset of them.
#![allow(dead_code)]

use sqlx::{Connection, PgConnection};

/// `DATABASE_URL` (or the local default) with its database replaced by `db`.
pub(crate) fn url_for(db: &str) -> String {
    let base = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let base = base.split('?').next().unwrap_or_default().to_owned();
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let cut = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    format!("{}/{db}", &base[..cut])
}

/// Creates the empty database `name` (dropping a leftover of an earlier run); its URL.
pub(crate) async fn create_db(name: &str) -> String {
    let mut admin = PgConnection::connect(&url_for("postgres"))
        .await
        .expect("admin connection");
    for sql in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name}"),
    ] {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&mut admin)
            .await
            .expect("create database");
    }
    url_for(name)
}

/// Drops the database `name`, closing whatever is still connected to it.
pub(crate) async fn drop_db(name: &str) {
    let mut admin = PgConnection::connect(&url_for("postgres"))
        .await
        .expect("admin connection");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(&mut admin)
    .await
    .expect("drop database");
}

/// A loopback address whose port was free a moment ago, for a server the test starts.
pub(crate) fn free_addr() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .to_string()
}

/// The pinned Python test tools' bin directory (`scripts/pytools.sh`, run by `scripts/test.sh`):
/// `ONCEBOX_PYTOOLS`, else `target/pytools/bin`. Fails the test, saying how to get them.
pub(crate) fn pytools() -> std::path::PathBuf {
    let dir = std::env::var_os("ONCEBOX_PYTOOLS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pytools/bin")
        });
    assert!(
        dir.join("python").exists(),
        "the Python test tools are missing at {}: run scripts/test.sh, or scripts/pytools.sh once",
        dir.display()
    );
    dir
}
