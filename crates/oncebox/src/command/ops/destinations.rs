//! `oncebox ops destinations`: list destinations' states, disable one, enable it again.

use clap::{Args as ClapArgs, Subcommand};
use serde_json::json;

use crate::command::args::{ConfigArgs, DbArgs};
use crate::command::connect;
use crate::exit::{CliError, CliResult};

/// `oncebox ops destinations`.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Each destination with a state: closed, open, half_open (breakers) or disabled; failures
    /// in a row, when the next probe may go, why it is disabled. A destination never disabled
    /// and without a breaker has no state to list: it is closed.
    List(ListArgs),
    /// Enable a destination: closed, no failures, and every delivery of it that waits (parked
    /// while disabled, deferred, or backing off before a retry) is made ready at once.
    Enable(DestinationArgs),
    /// Disable a configured destination of any kind (HTTP, AMQP, MCP; with a breaker or
    /// without) until it is enabled: within a second no worker starts a delivery to it, and its
    /// intents wait queued without spending attempts (their deadlines still run). A name the
    /// configuration does not know is refused.
    Disable(DisableArgs),
}

/// Where `ops destinations list` reads from.
#[derive(Debug, ClapArgs)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
}

/// The destination an operator enables or disables.
#[derive(Debug, ClapArgs)]
pub(crate) struct DestinationArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// The destination's name, as in the configuration.
    pub(crate) name: String,
}

/// The destination an operator disables, and why.
#[derive(Debug, ClapArgs)]
pub(crate) struct DisableArgs {
    #[command(flatten)]
    pub(crate) destination: DestinationArgs,
    /// Why (shown by `ops destinations list`).
    #[arg(long)]
    pub(crate) reason: String,
}

/// Changes a destination's state if asked, then lists every destination with a state.
pub(crate) async fn run(c: Command, json_out: bool) -> CliResult {
    use oncebox_store::breaker;
    let (db, change) = match &c {
        Command::List(a) => (&a.db, None),
        Command::Enable(a) => (&a.db, Some((a, None))),
        Command::Disable(a) => (
            &a.destination.db,
            Some((&a.destination, Some(a.reason.as_str()))),
        ),
    };
    if let Some((_, Some(reason))) = change
        && reason.trim().is_empty()
    {
        return Err(CliError::usage(
            "reason",
            "say why the destination is disabled",
        ));
    }
    let config = match change {
        Some((a, _)) => Some(a.config.load()?),
        None => None,
    };
    let pool = connect(db, 1).await?;
    if let (Some((a, reason)), Some(config)) = (change, &config) {
        let name = a.name.as_str();
        match (configured_destination(config, name), reason) {
            (Ok(_), Some(reason)) => {
                breaker::disable(&pool, name, &format!("operator: {}", reason.trim())).await?;
            }
            (known, None) => {
                // A destination no longer configured may still hold a state: it can be enabled
                // (cleared), never disabled.
                let actions = match known {
                    Ok(actions) => actions,
                    Err(unknown) => {
                        let states = breaker::states(&pool).await?;
                        if !states.iter().any(|s| s.destination == name) {
                            return Err(unknown);
                        }
                        Vec::new()
                    }
                };
                let ready = breaker::enable(&pool, name, &actions).await?;
                if !json_out {
                    println!("{name} enabled: {ready} waiting deliveries made ready");
                }
            }
            (Err(e), Some(_)) => return Err(e),
        }
    }
    let states = breaker::states(&pool).await?;
    if json_out {
        println!("{}", json!(states));
        return Ok(());
    }
    println!(
        "{:<20}  {:<9}  {:>8}  {:<10}  reason",
        "destination", "state", "failures", "probe in"
    );
    for s in &states {
        let probe = s
            .probe_in_seconds
            .map_or("-".to_owned(), |p| format!("{:.0} s", p.max(0.0)));
        println!(
            "{:<20}  {:<9}  {:>8}  {:<10}  {}",
            s.destination,
            s.state,
            s.failures,
            probe,
            s.reason.as_deref().unwrap_or("-")
        );
    }
    println!("{} destination(s) with a state", states.len());
    Ok(())
}

/// The actions that deliver to destination `name` of `config`; a name the configuration does not
/// know is a usage error naming the ones it does.
fn configured_destination(
    config: &oncebox_core::config::Config,
    name: &str,
) -> Result<Vec<String>, CliError> {
    if !config.destinations.contains_key(name) {
        let known: Vec<&str> = config.destinations.keys().map(String::as_str).collect();
        return Err(CliError::usage(
            "name",
            format!(
                "no destination {name:?} in the configuration (it has: {})",
                known.join(", ")
            ),
        ));
    }
    Ok(config
        .actions
        .iter()
        .filter(|(_, action)| action.destination == name)
        .map(|(action, _)| action.clone())
        .collect())
}
