//! `oncebox ops list`.

use clap::Args as ClapArgs;
use oncebox_core::duration::HumanDuration;
use oncebox_store::ops::{self, ListFilter};
use serde_json::json;

use crate::command::args::{DbArgs, StatusArg};
use crate::command::connect;
use crate::exit::CliResult;

/// The filters of `ops list`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Only this status.
    #[arg(long, value_enum)]
    pub(crate) status: Option<StatusArg>,
    /// Only this tenant.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only this action.
    #[arg(long)]
    pub(crate) action: Option<String>,
    /// Only intents not updated for this long (e.g. 10m, 2h, 7d).
    #[arg(long)]
    pub(crate) older_than: Option<HumanDuration>,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: i64,
}

/// Lists intents, the longest unchanged first (by when each last changed).
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    let status = a.status.map(|s| s.0);
    let pool = connect(&a.db, 1).await?;
    let filter = ListFilter {
        status,
        tenant_id: a.tenant,
        action: a.action,
        older_than: a.older_than.map(|d| d.get()),
        limit: a.limit,
    };
    let intents = ops::list(&pool, &filter).await?;
    if json_out {
        println!("{}", json!(intents));
        return Ok(());
    }
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
    Ok(())
}
