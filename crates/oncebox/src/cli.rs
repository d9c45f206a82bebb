//! Command-line definitions. Every subcommand has `--help`; `--json` makes output
//! machine-readable.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use oncebox_api::limits::{Rate, RateLimits};
use oncebox_core::duration::{HumanDuration, NonZeroDuration};
use oncebox_worker::WorkerSettings;
use std::num::NonZeroUsize;

const EXIT_CODES: &str = "\
Exit codes: 0 ok · 1 other failure (database down, I/O) · 2 usage or invalid input \
· 3 conflict (key reused with another request) · 4 not found.

Environment: DATABASE_URL (Postgres), ONCEBOX_CONFIG (config file), ONCEBOX_LOG (log filter, \
e.g. info or oncebox_store=debug).";

/// oncebox: one intent, at most one business effect.
///
/// Agents state intents; oncebox records each once (journal + outbox, in the caller's
/// transaction) and delivers it with a stable idempotency key.
#[derive(Debug, Parser)]
#[command(name = "oncebox", version, after_help = EXIT_CODES)]
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

/// Log output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create or upgrade the `oncebox` schema (safe to run from several processes at once).
    #[command(after_help = EXIT_CODES)]
    Migrate(DbArgs),
    /// Record one intent (journal + outbox) in its own transaction; a replay of the same
    /// request returns the existing intent.
    #[command(after_help = EXIT_CODES)]
    Submit(SubmitArgs),
    /// Print the request hash of an action and its arguments (hex SHA-256 of RFC 8785 JSON).
    #[command(after_help = EXIT_CODES)]
    Hash(HashArgs),
    /// Show one intent by tenant and idempotency key.
    #[command(after_help = EXIT_CODES)]
    Show(ShowArgs),
    /// Serve the agent-facing HTTP API (POST /v1/intents, GET /v1/intents/{key}[?wait=],
    /// POST /v1/intents/{key}/cancel, /healthz, /readyz). Stops on SIGTERM or SIGINT.
    #[command(after_help = EXIT_CODES)]
    Serve(ServeArgs),
    /// Ops: list, show, retry, resolve, cancel, audit, purge, stats, restored, token, destinations,
    /// lanes.
    #[command(subcommand, after_help = EXIT_CODES)]
    Ops(OpsCommand),
    /// Run a delivery worker: claim outbox rows, deliver them with their key, record outcomes.
    /// Stops on SIGTERM or SIGINT after finishing (or releasing) in-flight work; exit 0.
    #[command(after_help = EXIT_CODES)]
    Worker(WorkerArgs),
    /// Run the end-to-end demonstration with injected faults, in its own database.
    #[command(after_help = EXIT_CODES)]
    Demo(DemoArgs),
    /// Serve the configured tool actions ([actions.X.tool]) to one MCP client over stdio
    /// (stdin/stdout; logs go to stderr). Each tool call is an intent of --tenant, carried out
    /// at most once; see the README, "For MCP agents".
    #[command(after_help = EXIT_CODES)]
    Mcp(McpArgs),
    /// Run the reference receiver (the demo's billing system) as a server: POST records one
    /// effect per request (per key with --honours-keys), GET /effects?key=K looks effects up.
    /// For trying a deployment end to end (deploy/compose.yaml); never a production receiver.
    #[command(after_help = EXIT_CODES)]
    Receiver(ReceiverArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ReceiverArgs {
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

#[derive(Debug, Args)]
pub(crate) struct McpArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The configuration file; its actions with [actions.X.tool] become tools.
    #[arg(long, env = "ONCEBOX_CONFIG")]
    pub(crate) config: PathBuf,
    /// The tenant whose intents the calls are.
    #[arg(long, env = "ONCEBOX_TENANT")]
    pub(crate) tenant: String,
    /// How long a call waits for its intent to settle before answering "pending" with its key
    /// (follow it with the get_intent tool): 250ms, 30s, 2m.
    #[arg(long, default_value = "30s")]
    pub(crate) tool_wait: oncebox_core::duration::HumanDuration,
    /// Start even though the database's schema is newer than this binary.
    #[arg(long)]
    pub(crate) allow_newer_schema: bool,
}

/// Where the database is.
#[derive(Debug, Args)]
pub(crate) struct DbArgs {
    /// Postgres URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
}

#[derive(Debug, Args)]
pub(crate) struct SubmitArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The configuration file (actions and redaction rules).
    #[arg(long, env = "ONCEBOX_CONFIG")]
    pub(crate) config: PathBuf,
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

/// Operator commands. Every one takes `--json`.
#[derive(Debug, Subcommand)]
pub(crate) enum OpsCommand {
    /// List intents, oldest first.
    #[command(after_help = EXIT_CODES)]
    List(OpsListArgs),
    /// Show one intent and its whole history (the retry report).
    #[command(after_help = EXIT_CODES)]
    Show(OpsTarget),
    /// Send a failed or needs_review intent back to pending with the same key. Refuses
    /// succeeded intents (a retry could repeat their effect).
    #[command(after_help = EXIT_CODES)]
    Retry(OpsRetryArgs),
    /// Decide an intent that needs review: --succeeded [--reference R] or --failed --reason TEXT.
    #[command(after_help = EXIT_CODES)]
    Resolve(OpsResolveArgs),
    /// Cancel a pending intent that was never dispatched; otherwise say why not (exit 3).
    #[command(after_help = EXIT_CODES)]
    Cancel(OpsCancelArgs),
    /// The audit log: every operator decision (retry, resolve, cancel) from the CLI, the API or
    /// the MCP gateway — who, in what role and through what, which intent, why, the status
    /// before and after — newest first.
    #[command(after_help = EXIT_CODES)]
    Audit(OpsAuditArgs),
    /// Remove terminal intents completed longer ago than --older-than (default 30d, at least
    /// 1d), with their history. Non-terminal intents are never removed. A purged key can be
    /// used again: keep retention longer than any agent's retry window.
    #[command(after_help = EXIT_CODES)]
    Purge(OpsPurgeArgs),
    /// Counts by status, outbox rows by phase, age of the oldest ready row, and dead-letter queue
    /// depths read from RabbitMQ (with AMQP_URL).
    #[command(after_help = EXIT_CODES)]
    Stats(OpsStatsArgs),
    /// After restoring a backup, before any worker starts: mark every queued delivery as possibly
    /// sent, so that workers look it up, re-send it with its key or hand it to a person (per
    /// destination) instead of sending it blind. See docs/operations.md, "Restoring a backup".
    #[command(after_help = EXIT_CODES)]
    Restored(OpsRestoredArgs),
    /// API tokens.
    #[command(subcommand, after_help = EXIT_CODES)]
    Token(TokenCommand),
    /// Destinations' states: list them (circuit breakers of the destinations that have one, and
    /// every destination a 410 or an operator disabled), disable any configured destination, or
    /// enable one again.
    #[command(subcommand, after_help = EXIT_CODES)]
    Destinations(DestinationsCommand),
    /// Ordering lanes (intents submitted with --ordering-key): list the lanes with work, blocked
    /// ones first, or skip a blocked head so that its lane goes on.
    #[command(subcommand, after_help = EXIT_CODES)]
    Lanes(LanesCommand),
}

/// `oncebox ops lanes`.
#[derive(Debug, Subcommand)]
pub(crate) enum LanesCommand {
    /// Lanes with work: tenant, destination, ordering key, intents still to go, and the head
    /// (key, status, since when). A head that ended failed, expired or needs_review blocks its
    /// lane until it is retried, resolved as succeeded, or skipped.
    #[command(after_help = EXIT_CODES)]
    List(LanesListArgs),
    /// Skip a blocked head (failed, expired or needs_review): its lane goes on with the next
    /// intent. The intent itself is unchanged; recorded in the audit log.
    #[command(after_help = EXIT_CODES)]
    Skip(LanesSkipArgs),
}

#[derive(Debug, Args)]
pub(crate) struct LanesListArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Only this tenant's lanes.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only lanes blocked by their head.
    #[arg(long)]
    pub(crate) blocked: bool,
    /// At most this many lanes.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: u32,
}

#[derive(Debug, Args)]
pub(crate) struct LanesSkipArgs {
    #[command(flatten)]
    pub(crate) change: OpsChangeArgs,
    /// Why (recorded in the audit log).
    #[arg(long)]
    pub(crate) reason: String,
}

/// `oncebox ops destinations`.
#[derive(Debug, Subcommand)]
pub(crate) enum DestinationsCommand {
    /// Each destination with a state: closed, open, half_open (breakers) or disabled; failures
    /// in a row, when the next probe may go, why it is disabled. A destination never disabled
    /// and without a breaker has no state to list: it is closed.
    #[command(after_help = EXIT_CODES)]
    List(DestinationsListArgs),
    /// Enable a destination: closed, no failures, and every delivery of it that waits (parked
    /// while disabled, deferred, or backing off before a retry) is made ready at once.
    #[command(after_help = EXIT_CODES)]
    Enable(DestinationArgs),
    /// Disable a configured destination of any kind (HTTP, AMQP, MCP; with a breaker or
    /// without) until it is enabled: within a second no worker starts a delivery to it, and its
    /// intents wait queued without spending attempts (their deadlines still run). A name the
    /// configuration does not know is refused.
    #[command(after_help = EXIT_CODES)]
    Disable(DestinationDisableArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DestinationsListArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
}

#[derive(Debug, Args)]
pub(crate) struct DestinationArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The configuration file the workers run with: it names the destinations and their
    /// actions.
    #[arg(long, env = "ONCEBOX_CONFIG")]
    pub(crate) config: PathBuf,
    /// The destination's name, as in the configuration.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct DestinationDisableArgs {
    #[command(flatten)]
    pub(crate) destination: DestinationArgs,
    /// Why (shown by `ops destinations list`).
    #[arg(long)]
    pub(crate) reason: String,
}

/// Token commands.
#[derive(Debug, Subcommand)]
pub(crate) enum TokenCommand {
    /// Create a bearer token for a tenant; it is printed once and stored only as a hash.
    #[command(after_help = EXIT_CODES)]
    Create(TokenCreateArgs),
    /// Revoke tokens — by the token itself, by --id or by --label (every live token with it):
    /// the database refuses them at once; an API process that accepted one in the last 5 s may
    /// go on accepting it for up to 5 s more (its cache). Exit 4 if no live token matches.
    #[command(after_help = EXIT_CODES)]
    Revoke(TokenRevokeArgs),
    /// List tokens, newest first: id, tenant, role, label, created, expires, last used (to
    /// within a minute), revoked. Never the secret.
    #[command(after_help = EXIT_CODES)]
    List(TokenListArgs),
}

#[derive(Debug, Args)]
pub(crate) struct TokenCreateArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The tenant the token acts for.
    #[arg(long)]
    pub(crate) tenant: String,
    /// agent (submit, read, cancel) or ops.
    #[arg(long, default_value = "agent", value_parser = ["agent", "ops"])]
    pub(crate) role: String,
    /// A note to recognise the token by (and to revoke it by: `token revoke --label`).
    #[arg(long)]
    pub(crate) label: Option<String>,
    /// The token stops working after this long (e.g. 90d); default: until revoked.
    #[arg(long)]
    pub(crate) expires_in: Option<NonZeroDuration>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["token", "id", "label"])))]
pub(crate) struct TokenRevokeArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The token (obx_…), or - to read it from stdin (keeps it out of the shell history).
    pub(crate) token: Option<String>,
    /// The token with this id (from `token list`).
    #[arg(long)]
    pub(crate) id: Option<i64>,
    /// Every live token with this label.
    #[arg(long)]
    pub(crate) label: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct TokenListArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Only this tenant's tokens.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Include revoked and expired tokens.
    #[arg(long)]
    pub(crate) all: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The configuration file (actions and redaction rules).
    #[arg(long, env = "ONCEBOX_CONFIG")]
    pub(crate) config: PathBuf,
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
    /// Start even though the database's schema is newer than this binary (a rollback, when the
    /// newer release's notes say older binaries keep working).
    #[arg(long)]
    pub(crate) allow_newer_schema: bool,
    /// /mcp: how long a tool call waits for its intent to settle before answering "pending"
    /// with its key: 250ms, 30s, 2m.
    #[arg(long, default_value = "30s")]
    pub(crate) tool_wait: oncebox_core::duration::HumanDuration,
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
    /// /console: how long an operator's session lasts after login (the token's own expiry and
    /// revocation end it sooner): 30m, 8h, 1d.
    #[arg(long, default_value = "8h")]
    pub(crate) console_session: oncebox_core::duration::HumanDuration,
    /// /console: RabbitMQ URL, to show the dead-letter queue depths on the overview.
    #[arg(long, env = "AMQP_URL", hide_env_values = true)]
    pub(crate) amqp_url: Option<String>,
    /// /console: the dead-letter exchange (queues EXCHANGE.failed, .expired, .needs_review).
    #[arg(long, default_value_t = WorkerSettings::default().dead_letter_exchange)]
    pub(crate) dead_letter_exchange: String,
}

/// Request rates per token and per tenant (429 with Retry-After beyond them).
#[derive(Debug, Args)]
pub(crate) struct RateArgs {
    /// Requests per second one token may make, sustained; 0 for no limit.
    #[arg(long, default_value_t = RateLimits::default().per_token.per_second)]
    pub(crate) token_rate: f64,
    /// Requests one token may make at once after a quiet spell.
    #[arg(long, default_value_t = RateLimits::default().per_token.burst)]
    pub(crate) token_burst: f64,
    /// Requests per second one tenant's tokens may make together, sustained; 0 for no limit.
    #[arg(long, default_value_t = RateLimits::default().per_tenant.per_second)]
    pub(crate) tenant_rate: f64,
    /// Requests one tenant's tokens may make at once after a quiet spell.
    #[arg(long, default_value_t = RateLimits::default().per_tenant.burst)]
    pub(crate) tenant_burst: f64,
}

impl RateArgs {
    /// The limits, checked: rates and bursts are finite and not negative, a burst at least 1.
    pub(crate) fn limits(&self) -> Result<RateLimits, crate::exit::CliError> {
        let rate = |per_second: f64, burst: f64, rate_field: &str, burst_field: &str| {
            if !per_second.is_finite() || per_second < 0.0 {
                return Err(crate::exit::CliError::usage(
                    rate_field,
                    format!(
                        "--{} must be 0 (no limit) or a positive number",
                        rate_field.replace('_', "-")
                    ),
                ));
            }
            if !burst.is_finite() || burst < 1.0 {
                return Err(crate::exit::CliError::usage(
                    burst_field,
                    format!("--{} must be at least 1", burst_field.replace('_', "-")),
                ));
            }
            Ok(Rate { per_second, burst })
        };
        Ok(RateLimits {
            per_token: rate(
                self.token_rate,
                self.token_burst,
                "token_rate",
                "token_burst",
            )?,
            per_tenant: rate(
                self.tenant_rate,
                self.tenant_burst,
                "tenant_rate",
                "tenant_burst",
            )?,
            ..RateLimits::default()
        })
    }
}

/// How long and how many connections an HTTP server of oncebox keeps (the API, a worker's
/// probes): no client holds one for as long as it likes.
#[derive(Debug, Args)]
pub(crate) struct HttpLimitArgs {
    /// A connection must send a whole request head within this long of opening or of its
    /// previous answer, or it is closed: a half-sent request and an idle keep-alive connection
    /// alike (e.g. "10s").
    #[arg(long, default_value_t = default_header_timeout())]
    pub(crate) http_header_timeout: NonZeroDuration,
    /// A request's body must arrive whole within this long of its head; a slower one is
    /// answered 408 and its connection closed (e.g. "10s").
    #[arg(long, default_value_t = default_body_timeout())]
    pub(crate) http_body_timeout: NonZeroDuration,
    /// Connections served at once; more wait in the listen backlog until one closes.
    #[arg(long, default_value_t = oncebox_serve::Limits::default().max_connections,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    pub(crate) http_max_connections: usize,
}

fn default_header_timeout() -> NonZeroDuration {
    NonZeroDuration::new(oncebox_serve::Limits::default().header_timeout)
        .expect("the default header timeout is not zero")
}

fn default_body_timeout() -> NonZeroDuration {
    NonZeroDuration::new(oncebox_serve::Limits::default().body_timeout)
        .expect("the default body timeout is not zero")
}

impl HttpLimitArgs {
    /// The server limits these flags set.
    pub(crate) fn limits(&self) -> oncebox_serve::Limits {
        oncebox_serve::Limits {
            header_timeout: self.http_header_timeout.get(),
            body_timeout: self.http_body_timeout.get(),
            max_connections: self.http_max_connections,
            ..oncebox_serve::Limits::default()
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct OpsListArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Only this status (pending, in_flight, unknown, reconciling, needs_review, succeeded,
    /// failed, cancelled, expired).
    #[arg(long)]
    pub(crate) status: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only this action.
    #[arg(long)]
    pub(crate) action: Option<String>,
    /// Only intents not updated for this long (e.g. 10m, 2h, 7d).
    #[arg(long)]
    pub(crate) older_than: Option<HumanDuration>,
    /// At most this many.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: i64,
}

#[derive(Debug, Args)]
pub(crate) struct OpsTarget {
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
pub(crate) struct OpsChangeArgs {
    #[command(flatten)]
    pub(crate) target: OpsTarget,
    /// Who acts (recorded in the history); default $USER.
    #[arg(long, env = "USER", default_value = "ops")]
    pub(crate) actor: String,
}

#[derive(Debug, Args)]
pub(crate) struct OpsRetryArgs {
    #[command(flatten)]
    pub(crate) change: OpsChangeArgs,
    /// Why (recorded in the history).
    #[arg(long, default_value = "operator retry")]
    pub(crate) reason: String,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("decision").required(true).args(["succeeded", "failed"])))]
pub(crate) struct OpsResolveArgs {
    #[command(flatten)]
    pub(crate) change: OpsChangeArgs,
    /// The effect happened.
    #[arg(long)]
    pub(crate) succeeded: bool,
    /// The receiver's reference for it (only with --succeeded).
    #[arg(long, conflicts_with = "failed")]
    pub(crate) reference: Option<String>,
    /// The effect did not and will not happen (requires --reason).
    #[arg(long, requires = "reason")]
    pub(crate) failed: bool,
    /// Why (required with --failed).
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct OpsCancelArgs {
    #[command(flatten)]
    pub(crate) change: OpsChangeArgs,
    /// Why (recorded in the history and the audit log).
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct OpsAuditArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Only this tenant's intents.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only the intent with this idempotency key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// At most this many rows.
    #[arg(long, default_value_t = 100)]
    pub(crate) limit: i64,
}

#[derive(Debug, Args)]
pub(crate) struct OpsRestoredArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
}

#[derive(Debug, Args)]
pub(crate) struct OpsPurgeArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Retention: remove terminal intents completed longer ago than this (at least 1d).
    #[arg(long, default_value = "30d")]
    pub(crate) older_than: HumanDuration,
}

#[derive(Debug, Args)]
pub(crate) struct OpsStatsArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// RabbitMQ URL, to read dead-letter queue depths.
    #[arg(long, env = "AMQP_URL", hide_env_values = true)]
    pub(crate) amqp_url: Option<String>,
    /// The dead-letter exchange (queues EXCHANGE.failed, .expired, .needs_review).
    #[arg(long, default_value_t = WorkerSettings::default().dead_letter_exchange)]
    pub(crate) dead_letter_exchange: String,
}

#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The configuration file (actions and destinations).
    #[arg(long, env = "ONCEBOX_CONFIG")]
    pub(crate) config: PathBuf,
    /// Deliveries in flight at once.
    #[arg(long, default_value_t = WorkerSettings::default().concurrency)]
    pub(crate) concurrency: NonZeroUsize,
    /// This worker's name (lease owner, logs, retry report); default host-pid. In Kubernetes,
    /// the pod name.
    #[arg(long, env = "ONCEBOX_WORKER_ID")]
    pub(crate) id: Option<String>,
    /// Start even though the database's schema is newer than this binary (a rollback, when the
    /// newer release's notes say older binaries keep working).
    #[arg(long)]
    pub(crate) allow_newer_schema: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics, with the probes /healthz (503 when a
    /// loop has not turned for 3 leases) and /readyz (503 when the database does not answer),
    /// e.g. 127.0.0.1:9187.
    #[arg(long)]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// Limits of the probe server on --metrics-addr.
    #[command(flatten)]
    pub(crate) http: HttpLimitArgs,
    /// Lease length; must exceed every destination timeout by 2 s (e.g. "30s").
    #[arg(long, default_value_t = WorkerSettings::default().lease)]
    pub(crate) lease: NonZeroDuration,
    /// Poll for work this often when no notification arrives (e.g. "500ms").
    #[arg(long, default_value_t = WorkerSettings::default().poll_interval)]
    pub(crate) poll_interval: NonZeroDuration,
    /// While the pool's new work arrives slower than this many intents per second, stay
    /// registered as waiting so that each submit wakes this worker with NOTIFY at its commit;
    /// at or above it, poll every --busy-poll instead, so that submits do not pay for NOTIFY's
    /// cluster-wide commit lock. 0: notify only after a second without work.
    #[arg(long, default_value_t = WorkerSettings::default().notify_below)]
    pub(crate) notify_below: u32,
    /// Above --notify-below, look for work again this soon after an empty claim (e.g. "2ms").
    #[arg(long, default_value_t = WorkerSettings::default().busy_poll)]
    pub(crate) busy_poll: NonZeroDuration,
    /// On SIGTERM, wait this long for in-flight deliveries before releasing them.
    #[arg(long, default_value_t = HumanDuration(WorkerSettings::default().grace))]
    pub(crate) grace: HumanDuration,
    /// Rows per claim, at most.
    #[arg(long, default_value_t = WorkerSettings::default().batch)]
    pub(crate) batch: NonZeroUsize,
    /// RabbitMQ URL for dead letters (e.g. amqp://guest:guest@127.0.0.1:5672/%2f); without it
    /// dead letters wait in the outbox.
    #[arg(long, env = "AMQP_URL", hide_env_values = true)]
    pub(crate) amqp_url: Option<String>,
    /// The dead-letter exchange (topic, durable); queues are EXCHANGE.failed, .expired and
    /// .needs_review.
    #[arg(long, default_value_t = WorkerSettings::default().dead_letter_exchange)]
    pub(crate) dead_letter_exchange: String,
    /// Run only reconciliation (and dead-letter publishing): claim no deliveries.
    #[arg(long)]
    pub(crate) reconcile_only: bool,
}

#[derive(Debug, Args)]
pub(crate) struct HashArgs {
    /// The action name.
    #[arg(long)]
    pub(crate) action: String,
    /// The arguments: JSON, `@FILE`, or `-` for stdin.
    #[arg(long)]
    pub(crate) arguments: String,
    /// Apply this configuration's redaction rules for the action first, as submit does.
    #[arg(long, env = "ONCEBOX_CONFIG")]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// The idempotency key.
    pub(crate) key: String,
    /// The tenant.
    #[arg(long)]
    pub(crate) tenant: String,
}

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Postgres URL of the server; the demo creates its own database there (see --database-name).
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    pub(crate) database_url: String,
    /// RabbitMQ URL: one action of the demo publishes events, applied by an inbox consumer.
    #[arg(
        long,
        env = "AMQP_URL",
        hide_env_values = true,
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub(crate) amqp_url: String,
    /// The demo's database, dropped and created anew on every run.
    #[arg(long, default_value = "oncebox_demo")]
    pub(crate) database_name: String,
    /// How many distinct intents the agents submit.
    #[arg(long, default_value_t = 300)]
    pub(crate) intents: usize,
    /// Concurrent agents.
    #[arg(long, default_value_t = 16)]
    pub(crate) agents: usize,
    /// Keep the demo database afterwards for inspection.
    #[arg(long)]
    pub(crate) keep: bool,
}
