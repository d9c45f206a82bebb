//! `oncebox migrate`: create or upgrade the `oncebox` schema.

use clap::Args as ClapArgs;

use super::args::DbArgs;
use super::connect;
use crate::exit::CliResult;

/// Create or upgrade the `oncebox` schema (safe to run from several processes at once).
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
}

/// Applies every migration this binary knows that the database lacks.
pub(crate) async fn run(args: Args, json: bool) -> CliResult {
    let pool = connect(&args.db, 1).await?;
    oncebox_store::migrate(&pool).await?;
    let applied = oncebox_store::MIGRATOR.iter().count();
    if json {
        println!(
            "{}",
            serde_json::json!({"migrated": true, "migrations": applied})
        );
    } else {
        println!("schema oncebox is current ({applied} migrations)");
    }
    Ok(())
}
