//! Hearing that intents settled: one LISTEN connection per process on [`crate::DONE_CHANNEL`],
//! shared by every waiter (the API's `?wait=` long-polls, the MCP gateway's tool calls).

use sqlx::PgPool;
use tokio::sync::watch;

/// A counter bumped whenever intents settle (LISTEN on [`crate::DONE_CHANNEL`]); a waiter
/// re-reads its intent when it changes. The listener reconnects by itself; a notification lost
/// meanwhile only delays a waiter to its timeout. The task ends when every receiver is dropped.
///
/// # Errors
/// The database's error when the LISTEN connection cannot be opened.
pub async fn listen_for_settled(pool: &PgPool) -> Result<watch::Receiver<u64>, sqlx::Error> {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
    listener.listen(crate::DONE_CHANNEL).await?;
    let (tx, rx) = watch::channel(0u64);
    tokio::spawn(async move {
        loop {
            let heard = listener.recv().await;
            if tx.is_closed() {
                // Nobody is waiting any more.
                return;
            }
            if let Err(e) = heard {
                tracing::warn!(error = %e, "LISTEN for settled intents failed; reconnecting");
            }
            tx.send_modify(|n| *n += 1);
        }
    });
    Ok(rx)
}

/// Waits until `settled` says more intents settled or `deadline` passes, whichever is first —
/// one step of a waiter's loop (mark unchanged, read its intent, then call this). Should the
/// listener stop, it waits out the deadline instead of spinning.
pub async fn next_settlement(settled: &mut watch::Receiver<u64>, deadline: tokio::time::Instant) {
    let _ = tokio::time::timeout_at(deadline, async {
        if settled.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
    .await;
}
