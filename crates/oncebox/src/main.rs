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
            Command::Completions(args) => command::completions::run(args),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(json),
    }
}

/// Log directives that hold what must never be logged out of every log, whatever
/// `ONCEBOX_LOG` asks: rmcp logs each message it receives and sends (a tool call's arguments,
/// redacted fields included, and its result) at debug and trace, and an MCP session id (a
/// caller's handle on its session) when a session opens.
const LOG_CAPS: [&str; 3] = [
    "rmcp::service=info",
    "rmcp::transport=info",
    "rmcp::transport::streamable_http_server::session=warn",
];

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ONCEBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Each cap replaces a directive the filter has for the same target.
    let filter = LOG_CAPS
        .iter()
        .filter_map(|cap| cap.parse().ok())
        .fold(filter, |filter, cap| filter.add_directive(cap));
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
