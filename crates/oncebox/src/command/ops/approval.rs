//! `oncebox ops approve` and `oncebox ops reject`: a person's decision on an intent awaiting
//! approval (docs/approvals.md).

use clap::Args as ClapArgs;
use oncebox_store::approvals;

use super::{ChangeArgs, change};
use crate::exit::CliResult;

/// The intent `ops approve` approves, and why.
#[derive(Debug, ClapArgs)]
pub(crate) struct ApproveArgs {
    #[command(flatten)]
    pub(crate) change: ChangeArgs,
    /// Why (recorded in the audit log).
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

/// The intent `ops reject` rejects, and why.
#[derive(Debug, ClapArgs)]
pub(crate) struct RejectArgs {
    #[command(flatten)]
    pub(crate) change: ChangeArgs,
    /// Why (recorded in the audit log). Required.
    #[arg(long)]
    pub(crate) reason: String,
}

/// Records the actor's approval; the last one needed sends the intent on its way.
pub(crate) async fn approve(a: ApproveArgs, json_out: bool) -> CliResult {
    change(&a.change, json_out, async |tx, id, actor| {
        let approved = approvals::approve(tx, id, actor, a.reason.as_deref()).await?;
        if !json_out {
            eprintln!(
                "approval {} of {} recorded{}",
                approved.approvals,
                approved.needed,
                if approved.released() {
                    ": the intent is pending, on its way to its destination"
                } else {
                    "; waiting for another person"
                }
            );
        }
        Ok(approved.intent)
    })
    .await
}

/// Rejects the intent: it ends rejected and is never sent.
pub(crate) async fn reject(a: RejectArgs, json_out: bool) -> CliResult {
    change(&a.change, json_out, async |tx, id, actor| {
        approvals::reject(tx, id, actor, &a.reason).await
    })
    .await
}
