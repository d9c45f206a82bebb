//! Option groups more than one command takes, flattened into their `Args`: the database, the
//! configuration file, the schema guard, the dead-letter queues, the tool wait, an HTTP
//! server's limits and the API's request rates; and the values a closed set gives an option
//! (a status).

use std::path::PathBuf;

use clap::Args;
use oncebox_api::limits::{Rate, RateLimits};
use oncebox_core::config::Config;
use oncebox_core::duration::{HumanDuration, NonZeroDuration};
use oncebox_worker::WorkerSettings;
use sqlx::PgPool;

use crate::exit::{CliError, CliResult};

/// Where the database is.
#[derive(Debug, Args)]
pub(crate) struct DbArgs {
    /// Postgres URL.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub(crate) database_url: String,
}

/// Who writes the intents a command submits.
#[derive(Debug, Args)]
pub(crate) struct PrincipalArgs {
    /// The principal recorded as the submitter (`user:NAME`): a person or service name, 1–255
    /// bytes. It may not approve what it submits. Default: the database role the command
    /// connects as, recorded as `db:ROLE`.
    #[arg(long, env = "ONCEBOX_PRINCIPAL", value_name = "NAME")]
    pub(crate) principal: Option<String>,
}

impl PrincipalArgs {
    /// `intake`, recording the configured principal as the submitter when one is given.
    ///
    /// # Errors
    /// A usage error naming `principal` when the name cannot be one.
    pub(crate) fn apply(
        &self,
        intake: oncebox_store::Intake,
    ) -> Result<oncebox_store::Intake, crate::exit::CliError> {
        let Some(name) = &self.principal else {
            return Ok(intake);
        };
        let principal = oncebox_core::Principal::named("principal", name)
            .map_err(|e| crate::exit::CliError::usage("principal", e.to_string()))?;
        Ok(intake.with_principal(&principal))
    }
}

/// The configuration file.
#[derive(Debug, Args)]
pub(crate) struct ConfigArgs {
    /// The configuration file (TOML): actions, their destinations, redaction rules and tools.
    #[arg(long = "config", env = "ONCEBOX_CONFIG", value_name = "FILE")]
    pub(crate) file: PathBuf,
}

impl ConfigArgs {
    /// The configuration, read and validated (exit 2 naming the field at fault).
    pub(crate) fn load(&self) -> Result<Config, CliError> {
        super::load_config(&self.file)
    }
}

/// Whether a process may start on a schema newer than it knows.
#[derive(Debug, Args)]
pub(crate) struct SchemaGuard {
    /// Start even though the database's schema is newer than this binary (a rollback, when the
    /// newer release's notes say older binaries keep working).
    #[arg(long)]
    pub(crate) allow_newer_schema: bool,
}

impl SchemaGuard {
    /// Refuses (exit 1, saying why) a schema newer than this binary, unless allowed.
    pub(crate) async fn check(&self, pool: &PgPool) -> CliResult {
        if !self.allow_newer_schema {
            oncebox_store::refuse_newer_schema(pool).await?;
        }
        Ok(())
    }
}

/// The dead-letter queues on RabbitMQ.
#[derive(Debug, Args)]
pub(crate) struct DeadLetterArgs {
    /// RabbitMQ URL (e.g. amqp://guest:guest@127.0.0.1:5672/%2f): a worker publishes dead
    /// letters there (without it they wait in the outbox); `serve` and `ops stats` read the
    /// dead-letter queue depths from it.
    #[arg(long, env = "AMQP_URL", hide_env_values = true)]
    pub(crate) amqp_url: Option<String>,
    /// The dead-letter exchange (topic, durable); its queues are EXCHANGE.failed, .expired and
    /// .needs_review.
    #[arg(long, default_value_t = WorkerSettings::default().dead_letter_exchange)]
    pub(crate) dead_letter_exchange: String,
}

/// How long an MCP tool call waits for its intent.
#[derive(Debug, Args)]
pub(crate) struct ToolWaitArgs {
    /// How long an MCP tool call waits for its intent to settle before answering "pending"
    /// with its key (follow it with the get_intent tool): 250ms, 30s, 2m.
    #[arg(long, default_value = "30s")]
    pub(crate) tool_wait: HumanDuration,
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
    pub(crate) fn limits(&self) -> Result<RateLimits, CliError> {
        let rate = |per_second: f64, burst: f64, rate_field: &str, burst_field: &str| {
            if !per_second.is_finite() || per_second < 0.0 {
                return Err(CliError::usage(
                    rate_field,
                    format!(
                        "--{} must be 0 (no limit) or a positive number",
                        rate_field.replace('_', "-")
                    ),
                ));
            }
            if !burst.is_finite() || burst < 1.0 {
                return Err(CliError::usage(
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

/// An intent status as a command-line value: the values, their help and their completion come
/// from the core's list of statuses, so a new status needs no edit here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatusArg(pub(crate) oncebox_core::Status);

impl clap::ValueEnum for StatusArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [StatusArg; oncebox_core::Status::ALL.len()] = {
            let mut all =
                [StatusArg(oncebox_core::Status::Pending); oncebox_core::Status::ALL.len()];
            let mut i = 0;
            while i < all.len() {
                all[i] = StatusArg(oncebox_core::Status::ALL[i]);
                i += 1;
            }
            all
        };
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.as_str()))
    }
}
