//! A runnable exactly-once consumer: applies each message to a business table once.
//!
//! ```sh
//! DATABASE_URL=postgres://… AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f \
//!   cargo run -p oncebox-inbox --example consumer -- QUEUE
//! ```
//! Needs `oncebox migrate` on the database (the `oncebox_inbox` schema). Stops on Ctrl-C.

use oncebox_inbox::{HandlerFuture, Inbox};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let queue = std::env::args().nth(1).ok_or("usage: consumer QUEUE")?;
    let pool = sqlx::PgPool::connect(&std::env::var("DATABASE_URL")?).await?;
    let amqp = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    sqlx::query("CREATE TABLE IF NOT EXISTS received_intents (message_id text, tenant text, body jsonb, at timestamptz DEFAULT now())")
        .execute(&pool)
        .await?;
    let inbox = Inbox::new(pool, "example-consumer", 5);
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    inbox.run(&amqp, &queue, 64, apply, cancel).await;
    println!("{:?}", inbox.counters);
    Ok(())
}

/// The business write, in the inbox's transaction, kept apart by tenant (one queue serves every
/// tenant; the message id, the intent's delivery key, is unique across them). A `fn` (not a
/// closure) so that it can borrow the connection for the future it returns.
fn apply<'c>(
    conn: &'c mut sqlx::PgConnection,
    d: &'c lapin::message::Delivery,
) -> HandlerFuture<'c, sqlx::Error> {
    let id = d.properties.message_id().as_ref().map(|s| s.to_string());
    let tenant = oncebox_inbox::tenant(d);
    let body: serde_json::Value =
        serde_json::from_slice(&d.data).unwrap_or(serde_json::Value::Null);
    Box::pin(async move {
        sqlx::query("INSERT INTO received_intents (message_id, tenant, body) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(tenant)
            .bind(sqlx::types::Json(body))
            .execute(conn)
            .await
            .map(|_| ())
    })
}
