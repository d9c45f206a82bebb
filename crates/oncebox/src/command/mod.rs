//! The subcommands of `oncebox`, one module each holding its `Args` and its `run`, and what
//! they share: the option groups ([`args`]) and the helpers below (connecting, loading the
//! configuration, reading `--arguments`, waiting for a signal).

pub(crate) mod args;
pub(crate) mod hash;
pub(crate) mod mcp;
pub(crate) mod migrate;
pub(crate) mod ops;
pub(crate) mod receiver;
pub(crate) mod serve;
pub(crate) mod show;
pub(crate) mod submit;
pub(crate) mod worker;

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use oncebox_core::config::Config;
use oncebox_core::redact;
use oncebox_store::Intake;
use serde_json::Value;
use sqlx::PgPool;

use crate::exit::CliError;
use args::DbArgs;

/// Connects, riding out a database that is restarting for up to five seconds (the pool retries
/// refused connections with backoff); a wrong URL or password fails at once.
pub(crate) async fn connect(db: &DbArgs, max_connections: u32) -> Result<PgPool, CliError> {
    oncebox_store::connect(&db.database_url, max_connections, Duration::from_secs(5))
        .await
        .map_err(|e| {
            CliError::Other(anyhow::Error::new(e).context("cannot connect to DATABASE_URL"))
        })
}

/// Reads and validates the configuration file.
pub(crate) fn load_config(path: &Path) -> Result<Config, CliError> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the config file {}", path.display()))?;
    Config::from_toml(&text)
        .map_err(|e| CliError::usage(e.field.clone(), format!("{}: {e}", path.display())))
}

/// The redaction keys in the environment ([`redact::RedactionKeys::ENV`]), if set.
pub(crate) fn redaction_keys() -> Result<Option<redact::RedactionKeys>, CliError> {
    redact::RedactionKeys::from_env().map_err(|e| CliError::usage(redact::RedactionKeys::ENV, e))
}

/// The intake for `config`, hashing with the keys of the environment; refused (exit 2, naming
/// the variable) when a rule hashes and no key is set.
pub(crate) fn intake(config: &Config) -> Result<Intake, CliError> {
    Intake::new(config, redaction_keys()?)
        .map_err(|e| CliError::usage(redact::RedactionKeys::ENV, e.to_string()))
}

/// Parses `--arguments`: inline JSON, `@FILE`, or `-` for stdin.
pub(crate) fn read_arguments(spec: &str) -> Result<Value, CliError> {
    let text = if spec == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read the arguments from stdin")?;
        s
    } else if let Some(path) = spec.strip_prefix('@') {
        std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the arguments file {path}"))?
    } else {
        spec.to_owned()
    };
    oncebox_core::json::parse(text.as_bytes()).map_err(|e| {
        let field = format!("arguments{}", e.pointer().unwrap_or_default());
        CliError::usage(field.clone(), format!("{field}: {e}"))
    })
}

/// Resolves on SIGTERM or SIGINT (on Ctrl-C alone when those handlers cannot be installed):
/// how `serve`, `worker` and `receiver` learn to stop.
pub(crate) async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
