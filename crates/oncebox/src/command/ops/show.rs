//! `oncebox ops show`.

use clap::Args as ClapArgs;
use oncebox_store::ops::{self, AttemptRow};
use serde_json::json;

use super::Target;
use crate::command::connect;
use crate::exit::CliResult;
use crate::output;

/// The intent `ops show` shows.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) target: Target,
}

/// Prints the intent and its history.
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    let t = a.target;
    let pool = connect(&t.db, 1).await?;
    let intent = ops::find(&pool, &t.key, t.tenant.as_deref()).await?;
    let history = ops::history(&pool, intent.id).await?;
    if json_out {
        println!(
            "{}",
            json!({"intent": output::intent_json(&intent), "history": history})
        );
    } else {
        output::intent(&intent, false);
        print_history(&history);
    }
    Ok(())
}

fn print_history(history: &[AttemptRow]) {
    println!("  history:");
    for h in history {
        println!(
            "    #{:<3} {:<9} epoch {:<3} {:<24} {:<22} {}",
            h.attempt,
            h.phase_name(),
            h.epoch,
            h.worker,
            h.outcome.map_or("-", |k| k.as_str()),
            h.detail.as_deref().unwrap_or("")
        );
    }
}
