//! The readiness check behind `/readyz` (the API's and a worker's): the database answers a new
//! connection, and every migration this binary knows has been applied ([`crate::ready`]).
//!
//! It has its own connection budget, outside any pool: one connection at a time per process,
//! opened for the check and closed after it, so a probe never waits behind the pool's work (a
//! pool that is exhausted or hung answers the probe no sooner) and an abandoned check never
//! leaves a pooled connection in an unknown state. The whole check — waiting for a check already
//! under way, connecting, asking — is bounded by [`READY_TIMEOUT`]: a database that stops
//! answering makes the probe answer "not ready" on time, never hang.

use std::time::Duration;

use sqlx::Connection as _;
use sqlx::postgres::{PgConnectOptions, PgConnection};

/// How long a readiness check may take before it answers "not ready".
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// A bounded readiness check with a connection budget of one.
#[derive(Debug)]
pub struct ReadinessCheck {
    options: PgConnectOptions,
    timeout: Duration,
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl ReadinessCheck {
    /// A check connecting with `options`, within [`READY_TIMEOUT`].
    pub fn new(options: PgConnectOptions) -> ReadinessCheck {
        ReadinessCheck {
            options,
            timeout: READY_TIMEOUT,
            one_at_a_time: tokio::sync::Mutex::new(()),
        }
    }

    /// Whether the database is ready for this binary, within the timeout.
    ///
    /// # Errors
    /// One line for the probe to answer with: `database: …` (no connection, no answer in time)
    /// or `migrations: …` (the schema is behind this binary).
    pub async fn check(&self) -> Result<(), String> {
        let checked = tokio::time::timeout(self.timeout, async {
            let _one = self.one_at_a_time.lock().await;
            let mut conn = PgConnection::connect_with(&self.options)
                .await
                .map_err(|e| format!("database: {e}"))?;
            let ready = crate::ready(&mut conn).await;
            if let Err(e) = conn.close().await {
                tracing::debug!(error = %e, "closing the readiness connection failed");
            }
            ready
        })
        .await;
        checked.unwrap_or_else(|_| {
            Err(format!(
                "database: no answer within {} s",
                self.timeout.as_secs()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A "database" that accepts connections and never says a word: eight checks at once
    /// answer "no answer" within the timeout, having opened one connection between them. (The
    /// clock is tokio's paused one: the timeout is measured exactly, not on a busy machine.)
    #[tokio::test(start_paused = true)]
    async fn checks_are_bounded_in_time_and_open_one_connection_at_a_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(socket);
            }
        });
        let options = PgConnectOptions::new()
            .host("127.0.0.1")
            .port(port)
            .username("nobody");
        let check = Arc::new(ReadinessCheck::new(options));
        let started = tokio::time::Instant::now();
        let checks: Vec<_> = (0..8)
            .map(|_| {
                let check = check.clone();
                tokio::spawn(async move { check.check().await })
            })
            .collect();
        for c in checks {
            let why = c.await.expect("check").expect_err("no answer");
            assert!(why.contains("no answer within 2 s"), "{why}");
        }
        // All eight waited together for the one timeout, not one after another.
        assert_eq!(started.elapsed(), READY_TIMEOUT);
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            1,
            "one connection at a time"
        );
    }
}
