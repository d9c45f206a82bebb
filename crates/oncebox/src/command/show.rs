//! `oncebox show`: one intent by tenant and key.

use clap::Args as ClapArgs;
use oncebox_store::intent_by_key;

use super::args::DbArgs;
use super::connect;
use crate::exit::{CliError, CliResult};
use crate::output;

/// Show one intent by tenant and idempotency key.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The idempotency key.
    pub(crate) key: String,
    /// The tenant.
    #[arg(long)]
    pub(crate) tenant: String,
}

/// Prints the intent; exit 4 when the tenant has none with the key.
pub(crate) async fn run(args: Args, json: bool) -> CliResult {
    let pool = connect(&args.db, 1).await?;
    let intent = intent_by_key(&pool, &args.tenant, &args.key)
        .await?
        .ok_or_else(|| {
            CliError::NotFound(format!(
                "tenant {:?} has no intent with key {:?}",
                args.tenant, args.key
            ))
        })?;
    output::intent(&intent, json);
    Ok(())
}
