//! The database subcommands: migrate, submit, show; and hash, which needs no database.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use chrono::DateTime;
use oncebox_core::config::Config;
use oncebox_core::redact;
use oncebox_core::{NewIntent, request_hash};
use oncebox_store::{Intake, intent_by_key};
use serde_json::Value;
use sqlx::PgPool;

use crate::cli::{DbArgs, HashArgs, ShowArgs, SubmitArgs};
use crate::exit::{CliError, CliResult};
use crate::output;

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
fn read_arguments(spec: &str) -> Result<Value, CliError> {
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

pub(crate) async fn migrate(args: DbArgs, json: bool) -> CliResult {
    let pool = connect(&args, 1).await?;
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

pub(crate) async fn submit(args: SubmitArgs, json: bool) -> CliResult {
    let config = load_config(&args.config)?;
    let arguments = read_arguments(&args.arguments)?;
    let deadline = args
        .deadline
        .as_deref()
        .map(|d| {
            DateTime::parse_from_rfc3339(d)
                .map(|t| t.into())
                .map_err(|e| {
                    CliError::usage("deadline", format!("deadline: {d:?} is not RFC 3339: {e}"))
                })
        })
        .transpose()?;
    let intake = intake(&config)?;
    let intent = NewIntent {
        tenant_id: args.tenant,
        idempotency_key: args.key,
        action: args.action,
        arguments,
        business_ref: args.business_ref,
        run_id: args.run_id,
        step: args.step,
        deadline,
        ordering_key: args.ordering_key,
    };
    // Check the input before connecting: bad input is exit 2 even with the database down.
    intent
        .validate()
        .map_err(oncebox_store::SubmitError::from)?;
    let pool = connect(&args.db, 1).await?;
    let mut tx = pool.begin().await?;
    let submitted = intake.submit(&mut tx, intent).await?;
    tx.commit().await?;
    output::submitted(&submitted, json);
    Ok(())
}

pub(crate) fn hash(args: HashArgs, json: bool) -> CliResult {
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
        println!(
            "{}",
            serde_json::json!({"action": args.action, "request_hash": hash,
                               "canonical": oncebox_core::canonical_json(&serde_json::json!({"action": args.action, "arguments": arguments}))})
        );
    } else {
        println!("{hash}");
    }
    Ok(())
}

pub(crate) async fn show(args: ShowArgs, json: bool) -> CliResult {
    let pool = connect(&args.db, 1).await?;
    let intent = intent_by_key(&pool, &args.tenant, &args.key)
        .await?
        .ok_or_else(|| {
            CliError::NotFound(format!(
                "tenant {:?} has no intent with key {:?}",
                args.tenant, args.key
            ))
        })?;
    output::intent(&intent, json);
    Ok(())
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
