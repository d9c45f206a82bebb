//! `oncebox`: the one binary — migrate, submit, hash, show, serve, worker, ops, demo, receiver.
//! (The benchmarks are a binary of their own: `oncebox-bench`.)
//!
//! Exit codes (documented in `--help` and the README): 0 ok, 1 other failure, 2 usage or invalid
//! input, 3 conflict, 4 not found.

mod cli;
mod commands;
mod demo;
mod exit;
mod ops;
mod output;
mod run_worker;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command, LogFormat};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let json = cli.json;
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Migrate(args) => commands::migrate(args, json).await,
            Command::Submit(args) => commands::submit(args, json).await,
            Command::Hash(args) => commands::hash(args, json),
            Command::Show(args) => commands::show(args, json).await,
            Command::Worker(args) => run_worker::run(args).await,
            Command::Ops(cmd) => ops::run(cmd, json).await,
            Command::Serve(args) => serve(args).await,
            Command::Demo(args) => demo::run(args, json).await,
            Command::Receiver(args) => receiver(args).await,
            Command::Mcp(args) => mcp(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(json),
    }
}

/// `oncebox serve`: the HTTP API until SIGTERM or SIGINT.
async fn serve(args: cli::ServeArgs) -> exit::CliResult {
    let config = commands::load_config(&args.config)?;
    let intake = commands::intake(&config)?;
    let rates = args.rates.limits()?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            oncebox_serve::Tls::from_pem_files(cert, key)
                .map_err(|e| exit::CliError::usage("tls_cert", e))?,
        ),
        _ => None,
    };
    let pool = commands::connect(&args.db, args.db_connections).await?;
    if !args.allow_newer_schema {
        oncebox_store::refuse_newer_schema(&pool).await?;
    }
    let console = console_settings(&config, &args, tls.is_some());
    let state = oncebox_api::AppState::new(pool.clone(), intake.clone(), args.body_limit)
        .await?
        .with_rate_limits(rates)
        .with_console(console);
    let gateway = oncebox_mcp::Gateway::new(
        pool,
        &config,
        intake,
        args.tool_wait.get(),
        oncebox_mcp::Tenancy::PerRequest,
        state.settled(),
    )
    .with_passthrough(passthrough(&config)?);
    let mcp = oncebox_api::McpMount {
        gateway,
        allowed_hosts: args.mcp_allowed_hosts,
        allowed_origins: args.mcp_allowed_origins,
        max_sessions: args.mcp_max_sessions,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| {
            exit::CliError::usage("listen", format!("cannot listen on {}: {e}", args.listen))
        })?;
    tracing::info!(addr = %args.listen, tls = tls.is_some(), "serving the API");
    oncebox_serve::serve_with(
        listener,
        oncebox_api::router_with_mcp(state, Some(mcp)),
        args.http.limits(),
        tls,
        commands::wait_for_signal(),
    )
    .await;
    Ok(())
}

/// How `oncebox serve` serves `/console`: the configuration's destinations and their actions,
/// `Secure` cookies when it speaks TLS, and the dead-letter queue depths when it knows the
/// broker.
fn console_settings(
    config: &oncebox_core::config::Config,
    args: &cli::ServeArgs,
    tls: bool,
) -> oncebox_api::ConsoleSettings {
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
    let dead_letter_depths = args.amqp_url.clone().map(|url| {
        let exchange = args.dead_letter_exchange.clone();
        let read: oncebox_api::console::DeadLetterDepths = std::sync::Arc::new(move || {
            let (url, exchange) = (url.clone(), exchange.clone());
            Box::pin(async move {
                // A broker that does not answer must not hold the page.
                let wait = std::time::Duration::from_secs(3);
                match tokio::time::timeout(wait, ops::queue_depths(&url, &exchange)).await {
                    Ok(depths) => depths,
                    Err(_) => oncebox_worker::reasons()
                        .map(|r| (format!("{exchange}.{r}"), None))
                        .collect(),
                }
            })
        });
        read
    });
    oncebox_api::ConsoleSettings {
        destinations,
        secure_cookies: tls,
        session_lifetime: args.console_session.get(),
        dead_letter_depths,
    }
}

/// `oncebox mcp`: the MCP gateway over stdio until the client closes it (or SIGTERM/SIGINT).
async fn mcp(args: cli::McpArgs) -> exit::CliResult {
    use rmcp::ServiceExt;

    oncebox_core::key::validate_token(&args.tenant, oncebox_core::intent::MAX_TENANT_LEN)
        .map_err(|e| exit::CliError::usage("tenant", e.to_string()))?;
    let config = commands::load_config(&args.config)?;
    let intake = commands::intake(&config)?;
    let pool = commands::connect(&args.db, 4).await?;
    if !args.allow_newer_schema {
        oncebox_store::refuse_newer_schema(&pool).await?;
    }
    let settled = oncebox_store::listen_for_settled(&pool).await?;
    let tenancy = oncebox_mcp::Tenancy::Fixed {
        tenant: args.tenant,
    };
    let gateway = oncebox_mcp::Gateway::new(
        pool,
        &config,
        intake,
        args.tool_wait.get(),
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
        () = commands::wait_for_signal() => {}
    }
    Ok(())
}

/// The read-only upstream tools the gateway passes through, their credentials read from the
/// environment.
fn passthrough(
    config: &oncebox_core::config::Config,
) -> Result<oncebox_mcp::Passthrough, exit::CliError> {
    oncebox_mcp::Passthrough::from_config(config, |name| std::env::var(name).ok())
        .map_err(|e| exit::CliError::usage(e.field.clone(), e.to_string()))
}

async fn receiver(args: cli::ReceiverArgs) -> exit::CliResult {
    if !(0.0..=1.0).contains(&args.drop_rate) {
        return Err(exit::CliError::usage(
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
    };
    let rx = oncebox_receiver::Receiver::start_on(args.listen, config)
        .await
        .map_err(|e| {
            exit::CliError::usage("listen", format!("cannot listen on {}: {e}", args.listen))
        })?;
    eprintln!("receiver at {}", rx.url());
    commands::wait_for_signal().await;
    eprintln!("{} effects", rx.total_effects());
    Ok(())
}

/// The log directive that keeps MCP session ids out of every log.
const SESSION_LOG_CAP: &str = "rmcp::transport::streamable_http_server::session=warn";

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ONCEBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // An MCP session id is a caller's handle on its session: rmcp logs it when a session opens,
    // so its session module is held to warnings whatever the filter asks.
    let filter = match SESSION_LOG_CAP.parse() {
        Ok(cap) => filter.add_directive(cap),
        Err(_) => filter,
    };
    // Colours only for a person at a terminal: a log file or collector gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
