//! `oncebox-bench`: oncebox's throughput and latency, each measured side by side with a raw
//! baseline in the same run, in alternating rounds, reported as medians and ratios (the machine
//! is noisy; absolute numbers mean little, ratios measured together do).
//!
//! `cargo run --release -p oncebox-bench -- intake|deliver|latency|tools|signing|lanes|scale [--help]`. Exit codes: 0 ok, 1 the
//! benchmark failed (a database or broker error, a wrong result), 2 usage.

mod baseline;
mod chart;
mod cpu;
mod deliver;
mod harness;
mod intake;
mod intake_http;
mod lanes;
mod latency;
mod queries;
mod scale;
mod signing;
mod stats;
mod tools;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// oncebox's benchmarks, against raw baselines measured in the same run.
#[derive(Debug, Parser)]
#[command(name = "oncebox-bench", version)]
struct Cli {
    /// Print one JSON document instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Intents/s and latency of the library submit (begin, submit, commit) — with no worker
    /// waiting and with one waiting (NOTIFY) — against the raw two-insert transaction of
    /// baseline/intake.sql, run in-process and by pgbench, in alternating rounds. With --http,
    /// through the HTTP API instead.
    Intake(IntakeArgs),
    /// Deliveries/s draining a backlog into a local key-honouring no-op receiver, then
    /// end-to-end latency (submit commit → receiver) at half that rate; against the raw
    /// claim+complete cycle of baseline/cycle.sql run by pgbench in the same run. With --amqp,
    /// into RabbitMQ against a raw publisher-confirm loop.
    Deliver(DeliverArgs),
    /// End-to-end latency (submit commit → arrival at a local key-honouring receiver, over
    /// HTTP) at fixed offered rates and at saturation, with 1 and then 2 `oncebox worker`
    /// processes: p50, p90, p99 and max per rate, printed and drawn as a PNG chart.
    Latency(LatencyArgs),
    /// MCP tool calls/s through /mcp (each submitting and waiting for its intent to settle at
    /// a local no-op receiver) against POST /v1/intents + GET ?wait= through the HTTP API, in
    /// alternating rounds, with one in-process API server and one in-process worker.
    Tools(ToolsArgs),
    /// Deliveries/s draining a backlog over HTTP with Standard Webhooks signatures (v1
    /// HMAC-SHA256, and v1a Ed25519) against the same drain unsigned, in alternating rounds.
    Signing(SigningArgs),
    /// Deliveries/s of per-key ordering lanes (one delivery in flight per lane) against the
    /// same intents unordered, in alternating rounds.
    Lanes(LanesArgs),
    /// How the cost per intent grows along one axis — journal size, backlog, tenants with ready
    /// work, ordering lanes, destinations: at each size, in a scratch database of its own,
    /// submits and claims timed, then a drain by one in-process worker into a local no-op
    /// receiver; sizes alternate round by round; printed as a table and drawn as a PNG chart.
    Scale(ScaleArgs),
}

/// `oncebox-bench scale`.
#[derive(Debug, Args)]
pub(crate) struct ScaleArgs {
    /// Postgres URL; the benchmark creates and drops a database per size beside it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// The axis grown: journal (terminal intents kept beside the backlog), backlog (ready
    /// intents of one tenant), tenants (the backlog spread over more tenants, each with ready
    /// work), lanes (the backlog submitted over more ordering lanes) or destinations (the
    /// backlog spread over more destinations, each with a breaker and a rate limit).
    #[arg(long, value_enum)]
    axis: scale::Axis,
    /// Sizes along the axis, comma-separated, increasing; costs are compared to the first
    /// [default: journal 0,1000000,10000000; backlog 20000,200000,1000000; tenants
    /// 1,100,1000,10000; lanes 10,1000,100000; destinations 1,100,1000].
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<u32>>,
    /// Intents in the backlog along every axis but the backlog's.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    intents: u32,
    /// Submits timed at each size, one intent per transaction through the library, before the
    /// drain (which delivers them too).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..))]
    submits: u32,
    /// Worker tasks in flight at once (one in-process worker).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// Rounds; each drains every size once, in order. Each size reports its median round.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Offered rates of the commit-to-arrival points measured at each size after its drain, in
    /// intents/s, comma-separated, spread as the backlog was (over its tenants, lanes or
    /// destinations).
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    rates: Vec<latency::Rate>,
    /// Seconds measured at each rate, after a second's warm-up (longer at low rates, until 500
    /// intents); 0 measures no commit-to-arrival point.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=600))]
    latency_seconds: u64,
    /// Submitting tasks of the commit-to-arrival points, each with its own connection.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=500))]
    submitters: u32,
    /// Where the PNG chart is written.
    #[arg(long, default_value = "target/scale.png")]
    chart: PathBuf,
    /// A TrueType font for the chart's text.
    #[arg(long, default_value = DEFAULT_FONT)]
    font: PathBuf,
}

/// `oncebox-bench lanes`.
#[derive(Debug, Args)]
pub(crate) struct LanesArgs {
    /// Postgres URL; the benchmark creates and drops its own database beside it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Ordering lanes.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    lanes: u32,
    /// Intents in each lane.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..))]
    per_lane: u32,
    /// How long the receiver takes to answer each request, in milliseconds.
    #[arg(long, default_value_t = 0)]
    receiver_ms: u64,
    /// Worker tasks in flight at once (one in-process worker).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// Rounds (each drains once unordered and once ordered).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
}

/// The TTF the latency chart's text is drawn with (Debian's fonts-dejavu-core).
pub(crate) const DEFAULT_FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// `oncebox-bench latency`.
#[derive(Debug, Args)]
pub(crate) struct LatencyArgs {
    /// Postgres URL; the benchmark creates and drops its own database beside it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Offered rates in intents/s, comma-separated, in the order run; "max" is saturation
    /// (every submitter submits again as soon as its commit returns).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10,100,500,1000,2000,max"
    )]
    rates: Vec<latency::Rate>,
    /// Worker process counts, comma-separated: the whole curve is measured for each.
    #[arg(long, value_delimiter = ',', default_value = "1,2",
          value_parser = clap::value_parser!(u32).range(1..=16))]
    workers: Vec<u32>,
    /// Seconds measured per point (after the warm-up).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    seconds: u64,
    /// Measure low rates longer, until at least this many intents (10/s and 300: 30 s).
    #[arg(long, default_value_t = 300)]
    min_samples: u32,
    /// Milliseconds submitted at each point's rate before measuring starts.
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    /// Submitting tasks, each with its own connection and one transaction per intent.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=500))]
    submitters: u32,
    /// Deliveries in flight at once in each worker process.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// The `oncebox` binary run as the workers; default: the one beside this binary.
    #[arg(long)]
    oncebox_bin: Option<PathBuf>,
    /// An argument passed on to every `oncebox worker` (repeatable), e.g.
    /// --worker-arg=--notify-below=0 to wake workers by NOTIFY only after a second without work.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    /// Where the PNG chart is written.
    #[arg(long, default_value = "target/latency.png")]
    chart: PathBuf,
    /// A TrueType font for the chart's text.
    #[arg(long, default_value = DEFAULT_FONT)]
    font: PathBuf,
}

/// `oncebox-bench signing`.
#[derive(Debug, Args)]
pub(crate) struct SigningArgs {
    /// Postgres URL; the benchmark creates and drops its own database beside it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Intents in each backlog.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    intents: u32,
    /// Worker tasks in flight at once (one in-process worker).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: u32,
    /// Rounds (each drains once unsigned, once with v1, once with v1a).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
}

/// `oncebox-bench tools`.
#[derive(Debug, Args)]
pub(crate) struct ToolsArgs {
    /// Postgres URL; the benchmark creates and drops its own database beside it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Concurrent clients (MCP sessions, or HTTP API tasks).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=200))]
    clients: u32,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Rounds; each measures both cases once, alternating. Medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
}

/// Where the baseline scripts are.
#[derive(Debug, Args)]
struct BaselineArgs {
    /// A directory holding setup.sql, intake.sql, fill.sql and cycle.sql to run instead of the
    /// copies embedded in this binary; pgbench baselines are skipped when a script is missing.
    #[arg(long)]
    baseline_dir: Option<PathBuf>,
}

/// `oncebox-bench intake`.
#[derive(Debug, Args)]
pub(crate) struct IntakeArgs {
    /// Postgres URL; the benchmark creates and drops its own database beside it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Concurrent clients, each with its own connection.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    clients: u32,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Rounds; each measures every case once, alternating. Medians are reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Skip the case with a worker waiting, where every submit sends NOTIFY (which serialises
    /// commits); by default both cases are measured.
    #[arg(long)]
    skip_notify_case: bool,
    /// Submit through the HTTP API instead: an in-process `oncebox serve` on loopback, each
    /// client a task posting with `oncebox-client` (keep-alive); compared with the raw pgbench
    /// intake (or the raw SQL transaction when pgbench is missing).
    #[arg(long)]
    http: bool,
    #[command(flatten)]
    baseline: BaselineArgs,
}

/// `oncebox-bench deliver`.
#[derive(Debug, Args)]
pub(crate) struct DeliverArgs {
    /// Postgres URL; the benchmark creates and drops its own database beside it.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// Intents in the backlog.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..))]
    intents: u32,
    /// Tenants the backlog is spread over, each with ready work: the fair claim shares every
    /// claim between them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    tenants: u32,
    /// Worker tasks in flight at once (one in-process worker) [default: 256; with --amqp 512,
    /// twice the confirm window, so that claimed rows wait ready for the confirm slots that
    /// free up, as the raw loop's next message does]
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    concurrency: Option<u32>,
    /// Seconds measured of the paced phase (half the drain's rate offered, after a second's
    /// warm-up; commit to arrival) and of the pgbench baseline.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Rows of the raw baseline's backlog; the run fails if the baseline drains it within
    /// --seconds [default: 100,000 per second of --seconds, at least 300,000]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    baseline_rows: Option<u64>,
    /// Deliver over AMQP to a scratch RabbitMQ queue instead, against a raw lapin
    /// publisher-confirm loop (same message, persistent, same confirm window).
    #[arg(long)]
    amqp: bool,
    /// RabbitMQ URL for --amqp.
    #[arg(
        long,
        env = "AMQP_URL",
        hide_env_values = true,
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    amqp_url: String,
    #[command(flatten)]
    baseline: BaselineArgs,
}

/// Runs `f` in a scratch database of its own (`oncebox_bench_<what>_<pid>`, migrated) beside
/// `database_url`'s, and drops it afterwards — on an error too.
pub(crate) async fn in_scratch<T>(
    database_url: &str,
    what: &str,
    f: impl AsyncFnOnce(&oncebox_store::scratch::ScratchDb) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let name = format!("oncebox_bench_{what}_{}", std::process::id());
    let scratch = oncebox_store::scratch::ScratchDb::create(database_url, &name, true).await?;
    let result = f(&scratch).await;
    scratch.drop_db().await?;
    result
}

/// The allocator of the benchmark binary, as of `oncebox`'s: what is measured is the product's own.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("ONCEBOX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
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
    let result = runtime.block_on(async move {
        match cli.what {
            What::Intake(a) if a.http => intake_http::run(a, cli.json).await,
            What::Intake(a) => intake::run(a, cli.json).await,
            What::Deliver(a) => deliver::run(a, cli.json).await,
            What::Latency(a) => latency::run(a, cli.json).await,
            What::Tools(a) => tools::run(a, cli.json).await,
            What::Signing(a) => signing::run(a, cli.json).await,
            What::Lanes(a) => lanes::run(a, cli.json).await,
            What::Scale(a) => scale::run(a, cli.json).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
