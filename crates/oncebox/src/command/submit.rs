//! `oncebox submit`: record one intent in its own transaction.

use chrono::DateTime;
use clap::Args as ClapArgs;
use oncebox_core::NewIntent;

use super::args::{ConfigArgs, DbArgs, PrincipalArgs};
use super::{connect, intake, read_arguments};
use crate::exit::{CliError, CliResult};
use crate::output;

/// Record one intent (journal + outbox) in its own transaction; a replay of the same request
/// returns the existing intent.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    #[command(flatten)]
    pub(crate) principal: PrincipalArgs,
    /// The tenant that owns the intent.
    #[arg(long)]
    pub(crate) tenant: String,
    /// The idempotency key: 1–255 printable ASCII characters, no spaces. Every command takes
    /// the key the same way: as its first argument.
    pub(crate) key: String,
    /// A configured action name.
    #[arg(long)]
    pub(crate) action: String,
    /// The arguments: a JSON object, `@FILE` to read it from a file, or `-` for stdin.
    #[arg(long)]
    pub(crate) arguments: String,
    /// Your own reference for the business object (order number).
    #[arg(long)]
    pub(crate) business_ref: Option<String>,
    /// The agent run this intent belongs to.
    #[arg(long)]
    pub(crate) run_id: Option<String>,
    /// The step within the run.
    #[arg(long)]
    pub(crate) step: Option<String>,
    /// No attempt starts after this time (RFC 3339, e.g. 2026-12-01T10:00:00Z).
    #[arg(long)]
    pub(crate) deadline: Option<String>,
    /// Deliver in submit order with the tenant's other intents to the same destination that
    /// carry this key, one at a time (an order, an account: 1–255 bytes).
    #[arg(long)]
    pub(crate) ordering_key: Option<String>,
}

/// Validates the intent before connecting (bad input is exit 2 even with the database down),
/// then submits it and commits.
pub(crate) async fn run(args: Args, json: bool) -> CliResult {
    let config = args.config.load()?;
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
    let intake = args.principal.apply(intake(&config)?)?;
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
