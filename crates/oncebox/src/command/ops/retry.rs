//! `oncebox ops retry`.

use clap::Args as ClapArgs;
use oncebox_store::ops;

use super::{ChangeArgs, change};
use crate::exit::CliResult;

/// The intent `ops retry` sends back to pending, and why.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) change: ChangeArgs,
    /// Why (recorded in the history).
    #[arg(long, default_value = "operator retry")]
    pub(crate) reason: String,
}

/// Sends the intent back to pending with the same key.
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    change(&a.change, json_out, async |tx, id, actor| {
        ops::retry(tx, id, actor, &a.reason).await
    })
    .await
}
