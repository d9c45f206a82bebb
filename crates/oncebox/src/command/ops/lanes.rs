//! `oncebox ops lanes`: list ordering lanes, skip a blocked head.

use clap::{Args as ClapArgs, Subcommand};
use oncebox_store::ops;
use serde_json::json;

use super::{ChangeArgs, change};
use crate::command::args::DbArgs;
use crate::command::connect;
use crate::exit::{CliError, CliResult};

/// `oncebox ops lanes`.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Lanes with work: tenant, destination, ordering key, intents still to go, and the head
    /// (key, status, since when). A head that ended failed, expired or needs_review blocks its
    /// lane until it is retried, resolved as succeeded, or skipped.
    List(ListArgs),
    /// Skip a blocked head (failed, expired or needs_review): its lane goes on with the next
    /// intent. The intent itself is unchanged; recorded in the audit log.
    Skip(SkipArgs),
}

/// The filters of `ops lanes list`.
#[derive(Debug, ClapArgs)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Only this tenant's lanes.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only lanes blocked by their head.
    #[arg(long)]
    pub(crate) blocked: bool,
    /// At most this many lanes.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

/// The head `ops lanes skip` skips, and why.
#[derive(Debug, ClapArgs)]
pub(crate) struct SkipArgs {
    #[command(flatten)]
    pub(crate) change: ChangeArgs,
    /// Why (recorded in the audit log).
    #[arg(long)]
    pub(crate) reason: String,
}

/// Runs one lanes command.
pub(crate) async fn run(cmd: Command, json_out: bool) -> CliResult {
    match cmd {
        Command::List(a) => list(a, json_out).await,
        Command::Skip(a) => {
            if a.reason.trim().is_empty() {
                return Err(CliError::usage("reason", "say why the head is skipped"));
            }
            change(&a.change, json_out, async |tx, id, actor| {
                ops::skip(tx, id, actor, &a.reason).await
            })
            .await
        }
    }
}

async fn list(a: ListArgs, json_out: bool) -> CliResult {
    let pool = connect(&a.db, 1).await?;
    let lanes =
        oncebox_store::lanes::list(&pool, a.tenant.as_deref(), a.blocked, i64::from(a.limit))
            .await?;
    if json_out {
        println!("{}", json!(lanes));
        return Ok(());
    }
    println!(
        "{:<12}  {:<16}  {:<20}  {:>6}  {:<12}  {:<24}  since",
        "tenant", "destination", "ordering key", "queued", "head status", "head key"
    );
    for l in &lanes {
        let status = l
            .head_status
            .map_or("-".to_owned(), |s| s.as_str().to_owned());
        println!(
            "{:<12}  {:<16}  {:<20}  {:>6}  {:<12}  {:<24}  {}{}",
            l.tenant_id,
            l.destination,
            l.ordering_key,
            l.queued,
            status,
            l.head_key.as_deref().unwrap_or("-"),
            l.since.format("%Y-%m-%dT%H:%M:%SZ"),
            if l.blocked { "  BLOCKED" } else { "" }
        );
    }
    let blocked = lanes.iter().filter(|l| l.blocked).count();
    println!("{} lane(s) with work, {blocked} blocked", lanes.len());
    Ok(())
}
