//! The subcommands of `oncebox`, one module each holding its `Args` and its `run`, and what
//! they share: the option groups ([`args`]) and the helpers below (connecting, loading the
//! configuration, reading `--arguments`, waiting for a signal).

pub(crate) mod args;
pub(crate) mod completions;
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
        .map_err(|e| connect_error(&db.database_url, &e))
}

/// A failed connection in one sentence: where to (never the password), the cause once, and
/// what to do about it.
pub(crate) fn connect_error(database_url: &str, e: &oncebox_store::StoreError) -> CliError {
    let target = match database_url.parse::<sqlx::postgres::PgConnectOptions>() {
        Ok(o) => format!(
            "database {:?} at {}:{} (DATABASE_URL)",
            o.get_database().unwrap_or("postgres"),
            o.get_host(),
            o.get_port()
        ),
        Err(_) => "DATABASE_URL".to_owned(),
    };
    let (cause, hint) = match e {
        oncebox_store::StoreError::Database(sqlx::Error::Database(db)) => {
            let hint = match db.code().as_deref() {
                Some("3D000") => "create it (createdb NAME) or correct the name in DATABASE_URL",
                Some("28P01" | "28000") => "check the user and password in DATABASE_URL",
                Some("53300") => {
                    "the server has no connection slot left: wait, or raise its max_connections"
                }
                _ => "check DATABASE_URL and the server's log",
            };
            (db.message().to_owned(), hint)
        }
        oncebox_store::StoreError::Database(sqlx::Error::Configuration(c)) => (
            c.to_string(),
            "give a URL such as postgres://USER:PASSWORD@HOST:5432/DATABASE",
        ),
        oncebox_store::StoreError::Database(sqlx::Error::Io(io)) => {
            (io.to_string(), "is Postgres running and listening there?")
        }
        oncebox_store::StoreError::Database(sqlx::Error::PoolTimedOut) => (
            "no connection within 5 s".to_owned(),
            "is Postgres running and reachable from here?",
        ),
        other => (other.to_string(), "check DATABASE_URL"),
    };
    CliError::Other(anyhow::anyhow!(
        "cannot connect to the {target}: {cause}; {hint}"
    ))
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
    redact::RedactionKeys::from_env()
        .map_err(|e| CliError::usage(redact::RedactionKeys::ENV, e.to_string()))
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
