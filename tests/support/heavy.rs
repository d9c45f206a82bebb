//! One heavy test at a time across every test binary and process: tests that load the whole
//! machine (thousands of intents, several workers, benchmarks) or count what arrives in a stretch
//! of time take a Postgres advisory lock, held by a connection of their own for as long as the
//! guard lives. Test binaries, `cargo test` threads and parallel runners alike wait their turn,
//! so no such test is measured while another takes the CPU.

use sqlx::{Connection, PgConnection};

/// The advisory lock's key (`pg_advisory_lock`): any number no other user of the server takes.
const HEAVY_LOCK: i64 = 0x006e_6365_626f_7801;

/// Held while a heavy test runs; dropping it closes the connection, which releases the lock.
pub(crate) struct Heavy {
    _conn: PgConnection,
}

/// Waits until no other heavy test runs, then holds the lock until the guard is dropped.
pub(crate) async fn heavy() -> Heavy {
    let url = super::url_for("postgres");
    let mut conn = PgConnection::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect for the heavy-test lock: {e}"));
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(HEAVY_LOCK)
        .execute(&mut conn)
        .await
        .expect("the heavy-test lock");
    Heavy { _conn: conn }
}
