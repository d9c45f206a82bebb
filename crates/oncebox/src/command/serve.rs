//! `oncebox serve`: the HTTP API, the console and the MCP gateway at /mcp.

use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::args::{
    ConfigArgs, DbArgs, DeadLetterArgs, HttpLimitArgs, RateArgs, SchemaGuard, ToolWaitArgs,
};
use super::ops::stats::queue_depths;
use super::{connect, intake, wait_for_signal};
use crate::exit::{CliError, CliResult};

/// Serve the HTTP API (POST /v1/intents, GET /v1/intents/{key}[?wait=],
/// POST /v1/intents/{key}/cancel, the ops API under /v1/ops, /healthz, /readyz, /metrics,
/// /openapi.json), the MCP gateway at /mcp and the operators' console at /console. Stops on
/// SIGTERM or SIGINT.
#[derive(Debug, ClapArgs)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    #[command(flatten)]
    pub(crate) config: ConfigArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: std::net::SocketAddr,
    /// Largest request body, in bytes (413 beyond).
    #[arg(long, default_value_t = 256 * 1024)]
    pub(crate) body_limit: usize,
    /// Database connections in the pool, the one held for LISTEN (long-polls) included;
    /// requests beyond it wait for a free one.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) db_connections: u32,
    #[command(flatten)]
    pub(crate) http: HttpLimitArgs,
    #[command(flatten)]
    pub(crate) rates: RateArgs,
    /// Serve HTTPS with this certificate chain (PEM, leaf first), for deployments without a
    /// TLS-terminating proxy in front; requires --tls-key.
    #[arg(long, requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM); requires --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) schema: SchemaGuard,
    #[command(flatten)]
    pub(crate) tool_wait: ToolWaitArgs,
    /// /mcp: a `Host` header value accepted (`host` or `host:port`), repeatable; by default
    /// only loopback names (localhost, 127.0.0.1, ::1), against DNS rebinding. Name every host
    /// clients reach this server by.
    #[arg(long = "mcp-allowed-host", value_name = "HOST")]
    pub(crate) mcp_allowed_hosts: Vec<String>,
    /// /mcp: a browser origin accepted (`https://app.example.com:443`), repeatable; by default
    /// a request carrying any `Origin` header is refused (agents are not browsers).
    #[arg(long = "mcp-allowed-origin", value_name = "ORIGIN")]
    pub(crate) mcp_allowed_origins: Vec<String>,
    /// /mcp: MCP sessions open at once, at most; a client opening one more is answered 503 with
    /// Retry-After. A session idle for five minutes is closed.
    #[arg(long, default_value_t = oncebox_api::DEFAULT_MAX_SESSIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub(crate) mcp_max_sessions: usize,
    /// /mcp: MCP sessions one token may hold at once; a client of that token opening one more
    /// is answered 429 with Retry-After.
    #[arg(long, default_value_t = oncebox_api::DEFAULT_MAX_SESSIONS_PER_TOKEN,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub(crate) mcp_max_sessions_per_token: usize,
    /// /mcp: MCP sessions the tokens of one tenant may hold at once together; beyond, 429 with
    /// Retry-After.
    #[arg(long, default_value_t = oncebox_api::DEFAULT_MAX_SESSIONS_PER_TENANT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub(crate) mcp_max_sessions_per_tenant: usize,
    /// /console: how long an operator's session lasts after login (the token's own expiry and
    /// revocation end it sooner): 30m, 8h, 1d.
    #[arg(long, default_value = "8h")]
    pub(crate) console_session: oncebox_core::duration::HumanDuration,
    #[command(flatten)]
    pub(crate) dead_letters: DeadLetterArgs,
}

/// Serves until SIGTERM or SIGINT.
pub(crate) async fn run(args: Args) -> CliResult {
    let config = args.config.load()?;
    let intake = intake(&config)?;
    let rates = args.rates.limits()?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            oncebox_serve::Tls::from_pem_files(cert, key)
                .map_err(|e| CliError::usage("tls_cert", e))?,
        ),
        _ => None,
    };
    let pool = connect(&args.db, args.db_connections).await?;
    args.schema.check(&pool).await?;
    let console = console_settings(&config, &args, tls.is_some())?;
    let state = oncebox_api::AppState::new(pool.clone(), intake.clone(), args.body_limit)
        .await?
        .with_rate_limits(rates)
        .with_console(console);
    let gateway = oncebox_mcp::Gateway::new(
        pool,
        &config,
        intake,
        args.tool_wait.tool_wait.get(),
        oncebox_mcp::Tenancy::PerRequest,
        state.settled(),
    )
    .with_passthrough(super::mcp::passthrough(&config)?);
    let mcp = oncebox_api::McpMount {
        gateway,
        allowed_hosts: args.mcp_allowed_hosts,
        allowed_origins: args.mcp_allowed_origins,
        max_sessions: args.mcp_max_sessions,
        max_sessions_per_token: args.mcp_max_sessions_per_token,
        max_sessions_per_tenant: args.mcp_max_sessions_per_tenant,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| CliError::usage("listen", format!("cannot listen on {}: {e}", args.listen)))?;
    tracing::info!(addr = %args.listen, tls = tls.is_some(), "serving the API");
    oncebox_serve::serve_with(
        listener,
        oncebox_api::router_with_mcp(state, Some(mcp)),
        args.http.limits(),
        tls,
        wait_for_signal(),
    )
    .await;
    Ok(())
}

/// How `oncebox serve` serves `/console`: the configuration's destinations and their actions,
/// `Secure` cookies when it speaks TLS, and the dead-letter queue depths when it knows the
/// broker.
fn console_settings(
    config: &oncebox_core::config::Config,
    args: &Args,
    tls: bool,
) -> Result<oncebox_api::ConsoleSettings, CliError> {
    let mut destinations: std::collections::BTreeMap<String, Vec<String>> = config
        .destinations
        .keys()
        .map(|d| (d.clone(), Vec::new()))
        .collect();
    for (name, action) in &config.actions {
        destinations
            .entry(action.destination.clone())
            .or_default()
            .push(name.clone());
    }
    let dead_letter_depths = args.dead_letters.amqp_url.clone().map(|url| {
        let exchange = args.dead_letters.dead_letter_exchange.clone();
        let read: oncebox_api::console::DeadLetterDepths = std::sync::Arc::new(move || {
            let (url, exchange) = (url.clone(), exchange.clone());
            Box::pin(async move {
                // A broker that does not answer must not hold the page.
                let wait = std::time::Duration::from_secs(3);
                match tokio::time::timeout(wait, queue_depths(&url, &exchange)).await {
                    Ok(depths) => depths,
                    Err(_) => oncebox_worker::reasons()
                        .map(|r| (format!("{exchange}.{r}"), None))
                        .collect(),
                }
            })
        });
        read
    });
    let oidc = match &config.console.oidc {
        None => None,
        Some(oidc) => {
            oncebox_delivery::install_crypto_provider();
            let sign_in = oncebox_api::console::oidc::OidcSignIn::new(oidc.clone())
                .map_err(|e| CliError::usage("console.oidc.client_secret_env", e.to_string()))?;
            Some(std::sync::Arc::new(sign_in))
        }
    };
    Ok(oncebox_api::ConsoleSettings {
        destinations,
        secure_cookies: tls,
        session_lifetime: args.console_session.get(),
        dead_letter_depths,
        oidc,
    })
}
