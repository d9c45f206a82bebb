//! `oncebox ops purge`.

use std::time::Duration;

use clap::Args as ClapArgs;
use oncebox_core::duration::HumanDuration;
use oncebox_store::ops;
use serde_json::json;

use crate::command::args::DbArgs;
use crate::command::connect;
use crate::exit::{CliError, CliResult};

/// The shortest retention `purge` accepts: a purged key can be used again.
const MIN_RETENTION: Duration = Duration::from_secs(86_400);

/// The retention of `ops purge`.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Retention: remove terminal intents completed longer ago than this (at least 1d).
    #[arg(long, default_value = "30d")]
    pub(crate) older_than: HumanDuration,
}

/// Removes terminal intents older than the retention, with their history, in batches.
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    let older_than = a.older_than.get();
    if older_than < MIN_RETENTION {
        return Err(CliError::usage(
            "older_than",
            "--older-than must be at least 1d: a purged key can be reused, so retention must outlast every retry",
        ));
    }
    let pool = connect(&a.db, 1).await?;
    let removed = ops::purge(&pool, older_than).await?;
    if json_out {
        println!(
            "{}",
            json!({"purged": removed, "older_than_seconds": older_than.as_secs()})
        );
    } else {
        println!(
            "purged {removed} terminal intent(s) completed more than {} ago",
            a.older_than
        );
    }
    Ok(())
}
