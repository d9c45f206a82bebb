//! `oncebox ops`: what operators do with intents that need them.

use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use oncebox_core::Status;
use oncebox_store::ops::{self, ListFilter, OpsError, Resolution};
use serde_json::json;

use crate::cli::{OpsCommand, OpsTarget};
use crate::commands::connect;
use crate::exit::{CliError, CliResult};
use crate::output;

impl From<OpsError> for CliError {
    fn from(e: OpsError) -> Self {
        match e {
            OpsError::NotFound(m) => CliError::NotFound(m),
            OpsError::Refused(m) => CliError::Conflict(m),
            OpsError::Database(e) => CliError::Other(e.into()),
        }
    }
}

pub(crate) async fn run(cmd: OpsCommand, json_out: bool) -> CliResult {
    match cmd {
        OpsCommand::List(a) => {
            let status = a
                .status
                .as_deref()
                .map(str::parse::<Status>)
                .transpose()
                .map_err(|e| CliError::usage("status", format!("status: {e}")))?;
            let pool = connect(&a.db, 1).await?;
            let filter = ListFilter {
                status,
                tenant_id: a.tenant,
                action: a.action,
                older_than: a.older_than,
                limit: a.limit,
            };
            let intents = ops::list(&mut *pool.acquire().await?, &filter).await?;
            if json_out {
                println!("{}", json!(intents));
            } else {
                println!(
                    "{:>8}  {:<12}  {:<13}  {:<16}  {:>8}  {:<25}  key",
                    "id", "tenant", "status", "action", "attempts", "updated"
                );
                for i in &intents {
                    println!(
                        "{:>8}  {:<12}  {:<13}  {:<16}  {:>8}  {:<25}  {}",
                        i.id,
                        i.tenant_id,
                        i.status.as_str(),
                        i.action,
                        i.attempt_count,
                        i.updated_at.format("%Y-%m-%d %H:%M:%S%.3f"),
                        i.idempotency_key
                    );
                }
                println!("{} intent(s)", intents.len());
            }
        }
        OpsCommand::Show(t) => {
            let pool = connect(&t.db, 1).await?;
            let mut conn = pool.acquire().await?;
            let intent = ops::find(&mut conn, &t.key, t.tenant.as_deref()).await?;
            let history = ops::history(&mut conn, intent.id).await?;
            if json_out {
                println!("{}", json!({"intent": intent, "history": history}));
            } else {
                output::intent(&intent, false);
                println!("  history:");
                for h in &history {
                    println!(
                        "    #{:<3} {:<9} epoch {:<3} {:<24} {:<22} {}",
                        h.attempt,
                        h.phase,
                        h.epoch,
                        h.worker,
                        h.outcome.as_deref().unwrap_or("-"),
                        h.detail.as_deref().unwrap_or("")
                    );
                }
            }
        }
        OpsCommand::Retry(a) => {
            let why = a.reason.clone();
            change(&a.target, json_out, |tx, id, actor| {
                Box::pin(async move { ops::retry(tx, id, &actor, &why).await })
            })
            .await?;
        }
        OpsCommand::Resolve(a) => {
            let resolution = if a.succeeded {
                Resolution::Succeeded {
                    reference: a.reference.clone(),
                }
            } else {
                Resolution::Failed {
                    reason: a.reason.clone().unwrap_or_default(),
                }
            };
            change(&a.target, json_out, |tx, id, actor| {
                Box::pin(async move { ops::resolve(tx, id, &resolution, &actor).await })
            })
            .await?;
        }
        OpsCommand::Cancel(t) => {
            change(&t, json_out, |tx, id, actor| {
                Box::pin(async move { ops::cancel(tx, id, &actor).await })
            })
            .await?;
        }
        OpsCommand::Purge(a) => {
            if a.older_than < Duration::from_secs(86_400) {
                return Err(CliError::usage(
                    "older_than",
                    "--older-than must be at least 1d: a purged key can be reused, so retention must outlast every retry",
                ));
            }
            let pool = connect(&a.db, 1).await?;
            let removed = ops::purge(&mut *pool.acquire().await?, a.older_than).await?;
            if json_out {
                println!(
                    "{}",
                    json!({"purged": removed, "older_than_seconds": a.older_than.as_secs()})
                );
            } else {
                println!(
                    "purged {removed} terminal intent(s) completed more than {:?} ago",
                    a.older_than
                );
            }
        }
        OpsCommand::Token(crate::cli::TokenCommand::Revoke(a)) => {
            let token = if a.token == "-" {
                let mut line = String::new();
                std::io::stdin()
                    .read_line(&mut line)
                    .map_err(|e| CliError::usage("token", format!("cannot read stdin: {e}")))?;
                line.trim().to_owned()
            } else {
                a.token.trim().to_owned()
            };
            if token.is_empty() {
                return Err(CliError::usage("token", "the token is empty"));
            }
            let pool = connect(&a.db, 1).await?;
            if !oncebox_store::tokens::revoke_token(&mut *pool.acquire().await?, &token).await? {
                return Err(CliError::NotFound("no live token matches".into()));
            }
            if json_out {
                println!("{}", json!({"revoked": true}));
            } else {
                eprintln!("revoked");
            }
        }
        OpsCommand::Token(crate::cli::TokenCommand::Create(a)) => {
            oncebox_core::key::validate_token(&a.tenant, 128)
                .map_err(|e| CliError::usage("tenant", format!("tenant {e}")))?;
            let role = if a.role == "ops" {
                oncebox_store::tokens::Role::Ops
            } else {
                oncebox_store::tokens::Role::Agent
            };
            let pool = connect(&a.db, 1).await?;
            let token = oncebox_store::tokens::create_token(
                &mut *pool.acquire().await?,
                &a.tenant,
                role,
                a.label.as_deref(),
            )
            .await?;
            if json_out {
                println!(
                    "{}",
                    json!({"token": token, "tenant": a.tenant, "role": a.role})
                );
            } else {
                println!("{token}");
                eprintln!("(shown once: store it now; oncebox keeps only its hash)");
            }
        }
        OpsCommand::Stats(a) => {
            let pool = connect(&a.db, 1).await?;
            let stats = ops::stats(&mut *pool.acquire().await?).await?;
            let queues = match &a.amqp_url {
                Some(url) => Some(queue_depths(url, &a.dead_letter_exchange).await),
                None => None,
            };
            if json_out {
                println!("{}", json!({"stats": stats, "dead_letter_queues": queues}));
            } else {
                println!("intents by status:");
                for (s, n) in &stats.by_status {
                    println!("  {s:<14} {n:>10}");
                }
                println!("outbox by phase:");
                for (p, n) in &stats.outbox {
                    println!("  {p:<14} {n:>10}");
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
            }
        }
    }
    Ok(())
}

type Change<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<oncebox_store::Intent, OpsError>> + Send + 'a>,
>;

/// Finds the target, applies `f` in one transaction, commits, prints the intent.
async fn change<F>(t: &OpsTarget, json_out: bool, f: F) -> CliResult
where
    F: for<'a> FnOnce(
        &'a mut sqlx::Transaction<'static, sqlx::Postgres>,
        i64,
        String,
    ) -> Change<'a>,
{
    let pool = connect(&t.db, 1).await?;
    let target = ops::find(&mut *pool.acquire().await?, &t.key, t.tenant.as_deref()).await?;
    let mut tx = pool.begin().await?;
    let intent = f(&mut tx, target.id, format!("ops:{}", t.actor)).await?;
    tx.commit().await?;
    output::intent(&intent, json_out);
    Ok(())
}

/// Message counts of the dead-letter queues (passive declare: nothing is created).
async fn queue_depths(url: &str, exchange: &str) -> Vec<(String, Option<u32>)> {
    let mut out = Vec::new();
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .ok();
    for reason in oncebox_worker::REASONS {
        let name = format!("{exchange}.{reason}");
        let depth = match &conn {
            Some(c) => match c.create_channel().await {
                Ok(ch) => ch
                    .queue_declare(
                        name.as_str().into(),
                        QueueDeclareOptions {
                            passive: true,
                            ..QueueDeclareOptions::default()
                        },
                        FieldTable::default(),
                    )
                    .await
                    .ok()
                    .map(|q| q.message_count()),
                Err(_) => None,
            },
            None => None,
        };
        out.push((name, depth));
    }
    out
}
