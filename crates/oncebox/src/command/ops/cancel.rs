//! `oncebox ops cancel`.

use clap::Args as ClapArgs;
use oncebox_store::ops;

use super::{ChangeArgs, change};
use crate::exit::CliResult;

/// The intent `ops cancel` cancels, and why.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) change: ChangeArgs,
    /// Why (recorded in the history and the audit log).
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

/// Cancels the intent if it was never dispatched; otherwise says why not (exit 3).
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    change(&a.change, json_out, async |tx, id, actor| {
        ops::cancel(tx, id, actor, a.reason.as_deref()).await
    })
    .await
}
