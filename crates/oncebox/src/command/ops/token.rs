//! `oncebox ops token`: create, revoke and list API tokens.

use clap::{Args as ClapArgs, Subcommand};
use oncebox_core::Principal;
use oncebox_core::duration::NonZeroDuration;
use oncebox_store::tokens::{self, Role};
use serde_json::json;

use crate::command::args::DbArgs;
use crate::command::connect;
use crate::exit::{CliError, CliResult};

/// Token commands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create a bearer token for a tenant; it is printed once and stored only as a hash.
    Create(CreateArgs),
    /// Revoke tokens — by the token itself, by --id or by --label (every live token with it):
    /// the database refuses them at once; an API process that accepted one in the last 5 s may
    /// go on accepting it for up to 5 s more (its cache). Exit 4 if no live token matches.
    Revoke(RevokeArgs),
    /// List tokens, newest first: id, tenant, role, label, holder, created, expires, last used (to
    /// within a minute), revoked. Never the secret.
    List(ListArgs),
}

/// Runs one token command.
pub(crate) async fn run(cmd: Command, json_out: bool) -> CliResult {
    match cmd {
        Command::Create(a) => create(a, json_out).await,
        Command::Revoke(a) => revoke(a, json_out).await,
        Command::List(a) => list(a, json_out).await,
    }
}

/// The token `ops token create` makes.
#[derive(Debug, ClapArgs)]
pub(crate) struct CreateArgs {
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
    /// Whom the token is issued to (alice@example.com, billing-agent): the principal the audit
    /// log records for what it does, and one principal however many tokens they hold. A person
    /// who also signs in to the console through OpenID Connect is named by that principal,
    /// written whole (oidc:ISSUER#SUBJECT), so that both are one. Required for --role ops; an
    /// agent token without one is a principal of its own.
    #[arg(long)]
    pub(crate) holder: Option<String>,
    /// The token stops working after this long (e.g. 90d); default: until revoked.
    #[arg(long)]
    pub(crate) expires_in: Option<NonZeroDuration>,
}

/// The tokens `ops token revoke` revokes.
#[derive(Debug, ClapArgs)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["token", "id", "label"])))]
pub(crate) struct RevokeArgs {
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

/// The filters of `ops token list`.
#[derive(Debug, ClapArgs)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) db: DbArgs,
    /// Only this tenant's tokens.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Include revoked and expired tokens.
    #[arg(long)]
    pub(crate) all: bool,
}

async fn create(a: CreateArgs, json_out: bool) -> CliResult {
    oncebox_core::key::validate_token(&a.tenant, oncebox_core::intent::MAX_TENANT_LEN)
        .map_err(|e| CliError::usage("tenant", format!("tenant {e}")))?;
    let role: Role = a.role.parse().map_err(|e| CliError::usage("role", e))?;
    let holder = match a.holder.as_deref() {
        Some(h) => Some(
            Principal::check_holder("holder", h)
                .map_err(|e| CliError::usage("holder", e.to_string()))?,
        ),
        None if role == Role::Ops => {
            return Err(CliError::usage(
                "holder",
                "holder: an ops token names the person it is issued to \
                 (--holder alice@example.com): their decisions are recorded under that name",
            ));
        }
        None => None,
    };
    let pool = connect(&a.db, 1).await?;
    let lifetime = a.expires_in.map(NonZeroDuration::get);
    let new = tokens::NewToken {
        label: a.label.as_deref(),
        holder,
        lifetime,
        ..tokens::NewToken::new(&a.tenant, role)
    };
    let (id, token) = tokens::create_token(&pool, new).await?;
    if json_out {
        println!(
            "{}",
            json!({"token": token, "id": id, "tenant": a.tenant, "role": role,
                   "label": a.label, "holder": holder,
                   "expires_in_seconds": lifetime.map(|d| d.as_secs())})
        );
    } else {
        println!("{token}");
        eprintln!("(shown once: store it now; oncebox keeps only its hash)");
    }
    Ok(())
}

async fn revoke(a: RevokeArgs, json_out: bool) -> CliResult {
    let token = match a.token.as_deref() {
        Some("-") => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| CliError::usage("token", format!("cannot read stdin: {e}")))?;
            Some(line.trim().to_owned())
        }
        other => other.map(|t| t.trim().to_owned()),
    };
    let which = match (&token, a.id, &a.label) {
        (Some(t), _, _) if t.is_empty() => {
            return Err(CliError::usage("token", "the token is empty"));
        }
        (Some(t), _, _) => tokens::Revoke::Token(t),
        (None, Some(id), _) => tokens::Revoke::Id(id),
        (None, None, Some(label)) => tokens::Revoke::Label(label),
        (None, None, None) => {
            return Err(CliError::usage("token", "name a token, --id or --label"));
        }
    };
    let pool = connect(&a.db, 1).await?;
    let revoked = tokens::revoke(&pool, which).await?;
    if revoked.is_empty() {
        return Err(CliError::NotFound("no live token matches".into()));
    }
    if json_out {
        println!("{}", json!({"revoked": revoked}));
    } else {
        eprintln!("revoked {} token(s): ids {revoked:?}", revoked.len());
    }
    Ok(())
}

async fn list(a: ListArgs, json_out: bool) -> CliResult {
    let pool = connect(&a.db, 1).await?;
    let list = tokens::list(&pool, a.tenant.as_deref(), a.all).await?;
    if json_out {
        println!("{}", json!(list));
        return Ok(());
    }
    let when = |t: Option<chrono::DateTime<chrono::Utc>>| {
        t.map_or("-".to_owned(), |t| t.format("%Y-%m-%d %H:%M").to_string())
    };
    println!(
        "{:>6}  {:<12}  {:<5}  {:<16}  {:<20}  {:<16}  {:<16}  {:<16}  {:<16}",
        "id", "tenant", "role", "label", "holder", "created", "expires", "last used", "revoked"
    );
    for t in &list {
        println!(
            "{:>6}  {:<12}  {:<5}  {:<16}  {:<20}  {:<16}  {:<16}  {:<16}  {:<16}",
            t.id,
            t.tenant_id,
            t.role.as_str(),
            t.label.as_deref().unwrap_or("-"),
            t.holder.as_deref().unwrap_or("-"),
            when(Some(t.created_at)),
            when(t.expires_at),
            when(t.last_used_at),
            when(t.revoked_at),
        );
    }
    println!("{} token(s)", list.len());
    Ok(())
}
