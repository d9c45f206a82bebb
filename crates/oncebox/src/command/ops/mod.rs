//! `oncebox ops`: what operators do with intents that need them, one module per command.

pub(crate) mod approval;
pub(crate) mod audit;
pub(crate) mod cancel;
pub(crate) mod destinations;
pub(crate) mod lanes;
pub(crate) mod list;
pub(crate) mod purge;
pub(crate) mod resolve;
pub(crate) mod restored;
pub(crate) mod retry;
pub(crate) mod show;
pub(crate) mod stats;
pub(crate) mod token;

use clap::{Args, Subcommand};
use oncebox_store::Intent;
use oncebox_store::ops::{self, OpsError};

use super::args::DbArgs;
use super::connect;
use crate::exit::{CliError, CliResult};
use crate::output;

/// Ops: list, show, approve, reject, retry, resolve, cancel, audit, purge, stats, restored,
/// token, destinations, lanes.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List intents, the one unchanged longest first.
    List(list::Args),
    /// Show one intent and its whole history (the retry report).
    Show(show::Args),
    /// Approve an intent awaiting approval (its action's approval policy), through the ops API
    /// (--api) with your own ops token (ONCEBOX_TOKEN): the audit log records the token's
    /// holder. Each principal counts once, and whoever submitted it may not approve it; the
    /// last approval it needs sends it to pending, and a worker delivers it. Refused once its
    /// approval window closed (exit 3).
    Approve(approval::ApproveArgs),
    /// Reject an intent awaiting approval, with --reason, through the ops API with your own ops
    /// token (as approve): it ends rejected and is never sent.
    Reject(approval::RejectArgs),
    /// Send a failed or needs_review intent back to pending with the same key. Refuses
    /// succeeded intents (a retry could repeat their effect).
    Retry(retry::Args),
    /// Decide an intent that needs review: --succeeded [--reference R] or --failed --reason TEXT.
    Resolve(resolve::Args),
    /// Cancel a pending intent that was never dispatched; otherwise say why not (exit 3).
    Cancel(cancel::Args),
    /// The audit log: every operator decision (approve, reject, retry, resolve, cancel, skip)
    /// from the CLI, the API, the console or the MCP gateway — who, in what role and through what, which intent, why, the status
    /// before and after — newest first.
    Audit(audit::Args),
    /// Remove terminal intents completed longer ago than --older-than (default 30d, at least
    /// 1d), with their history, oldest first in batches of 10,000 (each its own transaction).
    /// Non-terminal intents are never removed. A purged key can be used again: keep retention
    /// longer than any agent's retry window.
    Purge(purge::Args),
    /// Counts by status, outbox rows by phase, age of the oldest ready row, and dead-letter queue
    /// depths read from RabbitMQ (with AMQP_URL).
    Stats(stats::Args),
    /// After restoring a backup, before any worker starts: mark every queued delivery as possibly
    /// sent, so that workers look it up, re-send it with its key or hand it to a person (per
    /// destination) instead of sending it blind. See docs/operations.md, "Restoring a backup".
    Restored(restored::Args),
    /// API tokens.
    #[command(subcommand)]
    Token(token::Command),
    /// Destinations' states: list them (circuit breakers of the destinations that have one, and
    /// every destination a 410 or an operator disabled), disable any configured destination, or
    /// enable one again.
    #[command(subcommand)]
    Destinations(destinations::Command),
    /// Ordering lanes (intents submitted with --ordering-key): list the lanes with work, blocked
    /// ones first, or skip a blocked head so that its lane goes on.
    #[command(subcommand)]
    Lanes(lanes::Command),
}

/// Runs one operator command.
pub(crate) async fn run(cmd: Command, json_out: bool) -> CliResult {
    match cmd {
        Command::List(a) => list::run(a, json_out).await,
        Command::Show(a) => show::run(a, json_out).await,
        Command::Approve(a) => approval::approve(a, json_out).await,
        Command::Reject(a) => approval::reject(a, json_out).await,
        Command::Retry(a) => retry::run(a, json_out).await,
        Command::Resolve(a) => resolve::run(a, json_out).await,
        Command::Cancel(a) => cancel::run(a, json_out).await,
        Command::Audit(a) => audit::run(a, json_out).await,
        Command::Purge(a) => purge::run(a, json_out).await,
        Command::Stats(a) => stats::run(a, json_out).await,
        Command::Restored(a) => restored::run(a, json_out).await,
        Command::Token(c) => token::run(c, json_out).await,
        Command::Destinations(c) => destinations::run(c, json_out).await,
        Command::Lanes(c) => lanes::run(c, json_out).await,
    }
}

impl From<OpsError> for CliError {
    fn from(e: OpsError) -> Self {
        match e {
            OpsError::NotFound(m) => CliError::NotFound(m),
            OpsError::Refused(m) => CliError::Conflict(m),
            OpsError::Database(e) => CliError::Other(e.into()),
        }
    }
}

/// The intent an operator names.
#[derive(Debug, Args)]
pub(crate) struct Target {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The intent's idempotency key, or its numeric id.
    pub(crate) key: String,
    /// The tenant, when the key is used by several.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
}

/// The intent an operator changes, and who does it.
#[derive(Debug, Args)]
pub(crate) struct ChangeArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// A name for people beside the database role the decision is recorded under (the audit
    /// log's principal is `db:ROLE`: the role this command connects as); default $USER.
    #[arg(long, env = "USER", default_value = "ops")]
    pub(crate) actor: String,
}

/// Finds the target, applies `f` (the transaction, the intent's id, the actor) in one
/// transaction, commits, prints the intent.
async fn change(
    c: &ChangeArgs,
    json_out: bool,
    f: impl AsyncFnOnce(&mut sqlx::PgConnection, i64, &ops::Actor) -> Result<Intent, OpsError>,
) -> CliResult {
    let t = &c.target;
    let pool = connect(&t.db, 1).await?;
    let target = ops::find(&pool, &t.key, t.tenant.as_deref()).await?;
    let role = pool.connect_options().get_username().to_owned();
    let actor = ops::Actor::new(format!("db:{role}"), "ops", "cli").with_label(Some(&c.actor));
    let mut tx = pool.begin().await?;
    let intent = f(&mut tx, target.id, &actor).await?;
    tx.commit().await?;
    output::intent(&intent, json_out);
    Ok(())
}
