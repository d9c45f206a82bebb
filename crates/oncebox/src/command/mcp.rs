//! `oncebox mcp`: the MCP gateway over stdio.

use clap::Args as ClapArgs;

use super::args::{ConfigArgs, DbArgs, PrincipalArgs, SchemaGuard, ToolWaitArgs};
use super::{connect, intake, wait_for_signal};
use crate::exit::{CliError, CliResult};

/// Serve the configured tool actions ([actions.X.tool]) to one MCP client over stdio
/// (stdin/stdout; logs go to stderr). Each tool call is an intent of --tenant, carried out
/// at most once; see docs/mcp.md.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    #[command(flatten)]
    pub(crate) principal: PrincipalArgs,
    /// The tenant whose intents the calls are.
    #[arg(long, env = "ONCEBOX_TENANT")]
    pub(crate) tenant: String,
    #[command(flatten)]
    pub(crate) tool_wait: ToolWaitArgs,
    #[command(flatten)]
    pub(crate) schema: SchemaGuard,
}

/// Serves until the client closes stdio (or SIGTERM/SIGINT).
pub(crate) async fn run(args: Args) -> CliResult {
    use rmcp::ServiceExt;

    oncebox_core::key::validate_token(&args.tenant, oncebox_core::intent::MAX_TENANT_LEN)
        .map_err(|e| CliError::usage("tenant", e.to_string()))?;
    let config = args.config.load()?;
    let intake = args.principal.apply(intake(&config)?)?;
    let pool = connect(&args.db, 4).await?;
    args.schema.check(&pool).await?;
    let settled = oncebox_store::listen_for_settled(&pool).await?;
    let tenancy = oncebox_mcp::Tenancy::Fixed {
        tenant: args.tenant,
    };
    let gateway = oncebox_mcp::Gateway::new(
        pool,
        &config,
        intake,
        args.tool_wait.tool_wait.get(),
        tenancy,
        settled,
    )
    .with_passthrough(passthrough(&config)?);
    let running = gateway
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP handshake over stdio failed: {e}"))?;
    tokio::select! {
        done = running.waiting() => {
            done.map_err(|e| anyhow::anyhow!("MCP over stdio ended: {e}"))?;
        }
        () = wait_for_signal() => {}
    }
    Ok(())
}

/// The read-only upstream tools the gateway passes through, their credentials read from the
/// environment.
pub(crate) fn passthrough(
    config: &oncebox_core::config::Config,
) -> Result<oncebox_mcp::Passthrough, CliError> {
    oncebox_mcp::Passthrough::from_config(config, |name| std::env::var(name).ok())
        .map_err(|e| CliError::usage(e.field.clone(), e.to_string()))
}
