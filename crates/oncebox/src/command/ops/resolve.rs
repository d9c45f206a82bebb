//! `oncebox ops resolve`.

use clap::Args as ClapArgs;
use oncebox_store::ops::{self, Resolution};

use super::{ChangeArgs, change};
use crate::exit::CliResult;

/// The intent `ops resolve` decides, and the decision.
#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("decision").required(true).args(["succeeded", "failed"])))]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) change: ChangeArgs,
    /// The effect happened.
    #[arg(long)]
    pub(crate) succeeded: bool,
    /// The receiver's reference for it (only with --succeeded).
    #[arg(long, conflicts_with = "failed")]
    pub(crate) reference: Option<String>,
    /// The effect did not and will not happen (requires --reason).
    #[arg(long, requires = "reason")]
    pub(crate) failed: bool,
    /// Why (required with --failed).
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

/// Records the operator's decision: succeeded (with its reference) or failed (with why).
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    let resolution = if a.succeeded {
        Resolution::Succeeded {
            reference: a.reference.clone(),
        }
    } else {
        Resolution::Failed {
            reason: a.reason.clone().unwrap_or_default(),
        }
    };
    change(&a.change, json_out, async |tx, id, actor| {
        ops::resolve(tx, id, &resolution, actor, a.reason.as_deref()).await
    })
    .await
}
