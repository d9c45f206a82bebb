//! `oncebox ops stats`, and the dead-letter queue depths it (and the console) reads.

use clap::Args as ClapArgs;
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use oncebox_store::ops;
use serde_json::json;

use crate::command::args::{DbArgs, DeadLetterArgs};
use crate::command::connect;
use crate::exit::CliResult;

/// Where `ops stats` reads from.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    #[command(flatten)]
    pub(crate) dead_letters: DeadLetterArgs,
}

/// Prints counts by status and phase, the oldest ready age and the dead-letter queue depths.
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    let pool = connect(&a.db, 1).await?;
    let stats = ops::stats(&mut *pool.acquire().await?).await?;
    let queues = match &a.dead_letters.amqp_url {
        Some(url) => Some(queue_depths(url, &a.dead_letters.dead_letter_exchange).await),
        None => None,
    };
    if json_out {
        println!("{}", json!({"stats": stats, "dead_letter_queues": queues}));
        return Ok(());
    }
    println!("intents by status:");
    for (s, n) in &stats.by_status {
        println!("  {:<14} {n:>10}", s.as_str());
    }
    println!("outbox by phase:");
    for (p, n) in &stats.outbox {
        println!("  {:<14} {n:>10}", p.as_str());
    }
    println!("oldest ready delivery: {:.1} s", stats.oldest_ready_seconds);
    match queues {
        Some(q) => {
            println!("dead-letter queues:");
            for (name, depth) in q {
                println!(
                    "  {name:<40} {}",
                    depth.map_or("unavailable".into(), |d| d.to_string())
                );
            }
        }
        None => println!("dead-letter queues: set AMQP_URL to read their depths"),
    }
    Ok(())
}

/// Message counts of the dead-letter queues (passive declare: nothing is created).
pub(crate) async fn queue_depths(url: &str, exchange: &str) -> Vec<(String, Option<u32>)> {
    let conn = match lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "cannot reach RabbitMQ for the dead-letter queue depths");
            None
        }
    };
    let mut out = Vec::new();
    for reason in oncebox_worker::reasons() {
        let name = format!("{exchange}.{reason}");
        let depth = match &conn {
            Some(c) => queue_depth(c, &name).await,
            None => None,
        };
        out.push((name, depth));
    }
    if let Some(c) = conn
        && let Err(e) = c.close(200, "done".into()).await
    {
        tracing::debug!(error = %e, "closing the RabbitMQ connection failed");
    }
    out
}

async fn queue_depth(conn: &lapin::Connection, name: &str) -> Option<u32> {
    let channel = conn.create_channel().await.ok()?;
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .ok()
        .map(|q| q.message_count())
}
