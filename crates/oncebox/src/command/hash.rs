//! `oncebox hash`: the request hash of an action and its arguments, without a database.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use oncebox_core::request_hash;

use super::{intake, load_config, read_arguments};
use crate::exit::{CliError, CliResult};

/// Print the request hash of an action and its arguments (hex SHA-256 of RFC 8785 JSON).
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// The action name.
    #[arg(long)]
    pub(crate) action: String,
    /// The arguments: JSON, `@FILE`, or `-` for stdin.
    #[arg(long)]
    pub(crate) arguments: String,
    /// Apply this configuration's redaction rules for the action first, as submit does.
    #[arg(long, env = "ONCEBOX_CONFIG")]
    pub(crate) config: Option<PathBuf>,
}

/// Prints the hash (with `--json`, the canonical text it hashes as well).
pub(crate) fn run(args: Args, json: bool) -> CliResult {
    let mut arguments = read_arguments(&args.arguments)?;
    // With a config: exactly what a submit would record (the intake's own redaction and hash).
    let hash = match &args.config {
        Some(path) => {
            let recorded = intake(&load_config(path)?)?
                .recorded(&args.action, &arguments)
                .map_err(|e| CliError::usage("action", format!("{}: {e}", path.display())))?;
            arguments = recorded.payload;
            recorded.request_hash
        }
        None => request_hash(&args.action, &arguments),
    };
    if json {
        let canonical = oncebox_core::canonical_json(
            &serde_json::json!({"action": args.action, "arguments": arguments}),
        );
        println!(
            "{}",
            serde_json::json!({"action": args.action, "request_hash": hash,
                               "canonical": canonical})
        );
    } else {
        println!("{hash}");
    }
    Ok(())
}
