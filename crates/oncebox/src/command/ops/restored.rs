//! `oncebox ops restored`.

use clap::Args as ClapArgs;
use oncebox_store::ops;
use serde_json::json;

use crate::command::args::DbArgs;
use crate::command::connect;
use crate::exit::CliResult;

/// The restored database `ops restored` marks.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
}

/// Marks every queued delivery as possibly sent.
pub(crate) async fn run(a: Args, json_out: bool) -> CliResult {
    let pool = connect(&a.db, 1).await?;
    let marked = ops::mark_restored(&pool).await?;
    if json_out {
        println!("{}", json!({ "marked": marked }));
    } else {
        println!(
            "{marked} queued deliveries marked as possibly sent: workers will look them \
             up, re-send them with their keys or hand them to a person"
        );
    }
    Ok(())
}
