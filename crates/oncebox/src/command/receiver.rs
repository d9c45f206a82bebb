//! `oncebox receiver`: the reference receiver as a server.

use clap::Args as ClapArgs;

use super::wait_for_signal;
use crate::exit::{CliError, CliResult};

/// Run the reference receiver (the demo's billing system) as a server: POST records one
/// effect per request (per key with --honours-keys), GET /effects?key=K looks effects up.
/// For trying a deployment end to end (deploy/compose.yaml); never a production receiver.
///
/// It keeps each effect, with its request body, for the lookup to answer with, and no other
/// record of the requests than a count per key: its memory grows with the keys it is sent and
/// the effects it executes, not with each request.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub(crate) listen: std::net::SocketAddr,
    /// Replay the first answer for a repeated Idempotency-Key instead of executing again.
    #[arg(long)]
    pub(crate) honours_keys: bool,
    /// Fraction (0 to 1) of answers dropped after executing, to exercise unknown outcomes.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) drop_rate: f64,
    /// Answer the lookup (GET /effects?key=K) with 401 unless it carries
    /// `Authorization: Bearer TOKEN`, like a lookup endpoint that needs a credential.
    #[arg(long, env = "ONCEBOX_RECEIVER_LOOKUP_TOKEN", hide_env_values = true)]
    pub(crate) lookup_token: Option<String>,
}

/// Serves until SIGTERM or SIGINT, then prints how many effects it made.
pub(crate) async fn run(args: Args) -> CliResult {
    if !(0.0..=1.0).contains(&args.drop_rate) {
        return Err(CliError::usage(
            "drop_rate",
            format!(
                "--drop-rate must be between 0 and 1, not {}",
                args.drop_rate
            ),
        ));
    }
    let config = oncebox_receiver::ReceiverConfig {
        honours_keys: args.honours_keys,
        drop_rate: args.drop_rate,
        seed: u64::from(std::process::id()),
        lookup_token: args.lookup_token,
        keep_no_bodies: false,
        keep_no_history: true,
    };
    let rx = oncebox_receiver::Receiver::start_on(args.listen, config)
        .await
        .map_err(|e| CliError::usage("listen", format!("cannot listen on {}: {e}", args.listen)))?;
    eprintln!("receiver at {}", rx.url());
    wait_for_signal().await;
    eprintln!("{} effects", rx.total_effects());
    Ok(())
}
