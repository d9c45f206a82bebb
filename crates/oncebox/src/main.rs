//! `oncebox`: the one binary — migrate, submit, hash, show, serve, worker, ops, demo, receiver.
//! (The benchmarks are a binary of their own: `oncebox-bench`.)
//!
//! Exit codes (documented in `--help` and docs/reference/cli.md): 0 ok, 1 other failure, 2 usage or invalid
//! input, 3 conflict, 4 not found.

mod cli;
mod command;
mod demo;
mod exit;
mod output;
#[cfg(test)]
mod reference;

use std::process::ExitCode;

use crate::cli::{Cli, Command, LogFormat};

/// mimalloc, not glibc's malloc: a drain allocates per request (HTTP client, futures), and
/// glibc's allocator took about a fifth of a worker's CPU (`docs/performance.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::from_env();
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
            Command::Migrate(args) => command::migrate::run(args, json).await,
            Command::Submit(args) => command::submit::run(args, json).await,
            Command::Hash(args) => command::hash::run(args, json),
            Command::Show(args) => command::show::run(args, json).await,
            Command::Worker(args) => command::worker::run(args).await,
            Command::Ops(cmd) => command::ops::run(cmd, json).await,
            Command::Serve(args) => command::serve::run(args).await,
            Command::Demo(args) => demo::run(args, json).await,
            Command::Receiver(args) => command::receiver::run(args).await,
            Command::Mcp(args) => command::mcp::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(json),
    }
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
