//! The command line: the parser, the global flags and the list of commands. Each command's
//! options and code live in its own module under [`crate::command`] (`demo` in
//! [`crate::demo`]); the exit codes are attached to every command's `--help` once, here.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::command::{completions, hash, mcp, migrate, ops, receiver, serve, show, submit, worker};

pub(crate) const EXIT_CODES: &str = "\
Exit codes: 0 ok · 1 other failure (database down, I/O) · 2 usage or invalid input \
· 3 conflict (key reused with another request) · 4 not found.

Environment: DATABASE_URL (Postgres), ONCEBOX_CONFIG (config file), ONCEBOX_LOG (log filter, \
e.g. info or oncebox_store=debug).";

/// oncebox: one intent, at most one business effect.
///
/// Agents state intents; oncebox records each once (journal + outbox, in the caller's
/// transaction) and delivers it with a stable idempotency key.
#[derive(Debug, Parser)]
#[command(name = "oncebox", version)]
pub(crate) struct Cli {
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    pub(crate) command: Command,
}

impl Cli {
    /// The command line of this process, parsed; `--help`, `--version` and usage errors (exit 2)
    /// end the process here, as clap does.
    pub(crate) fn from_env() -> Cli {
        let matches = command().get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// The whole command tree, every command's `--help` ending with the exit codes.
pub(crate) fn command() -> clap::Command {
    fn with_exit_codes(cmd: clap::Command) -> clap::Command {
        cmd.after_help(EXIT_CODES).mut_subcommands(with_exit_codes)
    }
    with_exit_codes(Cli::command())
}

/// Log output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The commands; each one's summary is the doc comment of its `Args`.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    Migrate(migrate::Args),
    Submit(submit::Args),
    Hash(hash::Args),
    Show(show::Args),
    Serve(serve::Args),
    /// Ops: list, show, approve, reject, retry, resolve, cancel, audit, purge, stats, restored,
    /// token, destinations, lanes.
    #[command(subcommand)]
    Ops(ops::Command),
    Worker(worker::Args),
    Demo(crate::demo::Args),
    Mcp(mcp::Args),
    Receiver(receiver::Args),
    Completions(completions::Args),
}
