//! `oncebox ops audit`.

use clap::Args as ClapArgs;
use oncebox_store::ops;
use serde_json::json;

use crate::command::args::DbArgs;
use crate::command::connect;
use crate::exit::CliResult;

/// The filters of `ops audit`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Only this tenant's intents.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only the intent with this idempotency key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// At most this many rows.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: i64,
}

/// Prints the operator decisions, newest first.
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    let pool = connect(&a.db, 1).await?;
    let rows = ops::audit_log(&pool, a.tenant.as_deref(), a.key.as_deref(), a.limit).await?;
    if json_out {
        println!("{}", json!(rows));
        return Ok(());
    }
    println!(
        "{:<23}  {:<16}  {:<6}  {:<4}  {:<8}  {:<27}  {:<12}  key / reason",
        "at", "actor", "role", "via", "action", "status", "tenant"
    );
    for r in &rows {
        println!(
            "{:<23}  {:<16}  {:<6}  {:<4}  {:<8}  {:<27}  {:<12}  {} / {}",
            r.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            r.actor,
            r.role,
            r.via,
            r.action,
            format!("{} -> {}", r.status_before, r.status_after),
            r.tenant_id,
            r.idempotency_key,
            r.reason.as_deref().unwrap_or("-")
        );
    }
    println!("{} decision(s)", rows.len());
    Ok(())
}
