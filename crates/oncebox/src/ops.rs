//! `oncebox ops`: what operators do with intents that need them.

use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use oncebox_core::Status;
use oncebox_core::duration::NonZeroDuration;
use oncebox_store::ops::{self, ListFilter, OpsError, Resolution};
use oncebox_store::tokens::{self, Role};
use oncebox_store::{Intent, ops::AttemptRow};
use serde_json::json;

use crate::cli::{
    DestinationsCommand, LanesCommand, LanesListArgs, OpsAuditArgs, OpsChangeArgs, OpsCommand,
    OpsListArgs, OpsPurgeArgs, OpsStatsArgs, OpsTarget, TokenCommand, TokenCreateArgs,
    TokenListArgs, TokenRevokeArgs,
};
use crate::commands::connect;
use crate::exit::{CliError, CliResult};
use crate::output;

/// The shortest retention `purge` accepts: a purged key can be used again.
const MIN_RETENTION: Duration = Duration::from_secs(86_400);

impl From<OpsError> for CliError {
    fn from(e: OpsError) -> Self {
        match e {
            OpsError::NotFound(m) => CliError::NotFound(m),
            OpsError::Refused(m) => CliError::Conflict(m),
            OpsError::Database(e) => CliError::Other(e.into()),
        }
    }
}

pub(crate) async fn run(cmd: OpsCommand, json_out: bool) -> CliResult {
    match cmd {
        OpsCommand::List(a) => list(a, json_out).await,
        OpsCommand::Show(t) => show(t, json_out).await,
        OpsCommand::Retry(a) => {
            change(&a.change, json_out, async |tx, id, actor| {
                ops::retry(tx, id, actor, &a.reason).await
            })
            .await
        }
        OpsCommand::Resolve(a) => {
            let resolution = if a.succeeded {
                Resolution::Succeeded {
                    reference: a.reference.clone(),
                }
            } else {
                Resolution::Failed {
                    reason: a.reason.clone().unwrap_or_default(),
                }
            };
            change(&a.change, json_out, async |tx, id, actor| {
                ops::resolve(tx, id, &resolution, actor, a.reason.as_deref()).await
            })
            .await
        }
        OpsCommand::Cancel(a) => {
            change(&a.change, json_out, async |tx, id, actor| {
                ops::cancel(tx, id, actor, a.reason.as_deref()).await
            })
            .await
        }
        OpsCommand::Audit(a) => audit(a, json_out).await,
        OpsCommand::Purge(a) => purge(a, json_out).await,
        OpsCommand::Restored(a) => {
            let pool = connect(&a.db, 1).await?;
            let marked = ops::mark_restored(&pool).await?;
            if json_out {
                println!("{}", json!({ "marked": marked }));
            } else {
                println!(
                    "{marked} queued deliveries marked as possibly sent: workers will look them \
                     up, re-send them with their keys or hand them to a person"
                );
            }
            Ok(())
        }
        OpsCommand::Token(TokenCommand::Create(a)) => token_create(a, json_out).await,
        OpsCommand::Token(TokenCommand::Revoke(a)) => token_revoke(a, json_out).await,
        OpsCommand::Token(TokenCommand::List(a)) => token_list(a, json_out).await,
        OpsCommand::Stats(a) => stats(a, json_out).await,
        OpsCommand::Destinations(c) => destinations(c, json_out).await,
        OpsCommand::Lanes(LanesCommand::List(a)) => lanes(a, json_out).await,
        OpsCommand::Lanes(LanesCommand::Skip(a)) => {
            if a.reason.trim().is_empty() {
                return Err(CliError::usage("reason", "say why the head is skipped"));
            }
            change(&a.change, json_out, async |tx, id, actor| {
                ops::skip(tx, id, actor, &a.reason).await
            })
            .await
        }
    }
}

async fn lanes(a: LanesListArgs, json_out: bool) -> CliResult {
    let pool = connect(&a.db, 1).await?;
    let lanes =
        oncebox_store::lanes::list(&pool, a.tenant.as_deref(), a.blocked, i64::from(a.limit))
            .await?;
    if json_out {
        println!("{}", json!(lanes));
        return Ok(());
    }
    println!(
        "{:<12}  {:<16}  {:<20}  {:>6}  {:<12}  {:<24}  since",
        "tenant", "destination", "ordering key", "queued", "head status", "head key"
    );
    for l in &lanes {
        let status = l
            .head_status
            .map_or("-".to_owned(), |s| s.as_str().to_owned());
        println!(
            "{:<12}  {:<16}  {:<20}  {:>6}  {:<12}  {:<24}  {}{}",
            l.tenant_id,
            l.destination,
            l.ordering_key,
            l.queued,
            status,
            l.head_key.as_deref().unwrap_or("-"),
            l.since.format("%Y-%m-%dT%H:%M:%SZ"),
            if l.blocked { "  BLOCKED" } else { "" }
        );
    }
    let blocked = lanes.iter().filter(|l| l.blocked).count();
    println!("{} lane(s) with work, {blocked} blocked", lanes.len());
    Ok(())
}

async fn destinations(c: DestinationsCommand, json_out: bool) -> CliResult {
    use oncebox_store::breaker;
    let (db, change) = match &c {
        DestinationsCommand::List(a) => (&a.db, None),
        DestinationsCommand::Enable(a) => (&a.db, Some((a, None))),
        DestinationsCommand::Disable(a) => (
            &a.destination.db,
            Some((&a.destination, Some(a.reason.as_str()))),
        ),
    };
    if let Some((_, Some(reason))) = change
        && reason.trim().is_empty()
    {
        return Err(CliError::usage(
            "reason",
            "say why the destination is disabled",
        ));
    }
    let config = match change {
        Some((a, _)) => Some(crate::commands::load_config(&a.config)?),
        None => None,
    };
    let pool = connect(db, 1).await?;
    if let (Some((a, reason)), Some(config)) = (change, &config) {
        let name = a.name.as_str();
        match (configured_destination(config, name), reason) {
            (Ok(_), Some(reason)) => {
                breaker::disable(&pool, name, &format!("operator: {}", reason.trim())).await?;
            }
            (known, None) => {
                // A destination no longer configured may still hold a state: it can be enabled
                // (cleared), never disabled.
                let actions = match known {
                    Ok(actions) => actions,
                    Err(unknown) => {
                        let states = breaker::states(&pool).await?;
                        if !states.iter().any(|s| s.destination == name) {
                            return Err(unknown);
                        }
                        Vec::new()
                    }
                };
                let ready = breaker::enable(&pool, name, &actions).await?;
                if !json_out {
                    println!("{name} enabled: {ready} waiting deliveries made ready");
                }
            }
            (Err(e), Some(_)) => return Err(e),
        }
    }
    let states = breaker::states(&pool).await?;
    if json_out {
        println!("{}", json!(states));
        return Ok(());
    }
    println!(
        "{:<20}  {:<9}  {:>8}  {:<10}  reason",
        "destination", "state", "failures", "probe in"
    );
    for s in &states {
        let probe = s
            .probe_in_seconds
            .map_or("-".to_owned(), |p| format!("{:.0} s", p.max(0.0)));
        println!(
            "{:<20}  {:<9}  {:>8}  {:<10}  {}",
            s.destination,
            s.state,
            s.failures,
            probe,
            s.reason.as_deref().unwrap_or("-")
        );
    }
    println!("{} destination(s) with a state", states.len());
    Ok(())
}

/// The actions that deliver to destination `name` of `config`; a name the configuration does not
/// know is a usage error naming the ones it does.
fn configured_destination(
    config: &oncebox_core::config::Config,
    name: &str,
) -> Result<Vec<String>, CliError> {
    if !config.destinations.contains_key(name) {
        let known: Vec<&str> = config.destinations.keys().map(String::as_str).collect();
        return Err(CliError::usage(
            "name",
            format!(
                "no destination {name:?} in the configuration (it has: {})",
                known.join(", ")
            ),
        ));
    }
    Ok(config
        .actions
        .iter()
        .filter(|(_, action)| action.destination == name)
        .map(|(action, _)| action.clone())
        .collect())
}

async fn list(a: OpsListArgs, json_out: bool) -> CliResult {
    let status = a
        .status
        .as_deref()
        .map(str::parse::<Status>)
        .transpose()
        .map_err(|e| CliError::usage("status", format!("status: {e}")))?;
    let pool = connect(&a.db, 1).await?;
    let filter = ListFilter {
        status,
        tenant_id: a.tenant,
        action: a.action,
        older_than: a.older_than.map(|d| d.get()),
        limit: a.limit,
    };
    let intents = ops::list(&pool, &filter).await?;
    if json_out {
        println!("{}", json!(intents));
        return Ok(());
    }
    println!(
        "{:>8}  {:<12}  {:<13}  {:<16}  {:>8}  {:<25}  key",
        "id", "tenant", "status", "action", "attempts", "updated"
    );
    for i in &intents {
        println!(
            "{:>8}  {:<12}  {:<13}  {:<16}  {:>8}  {:<25}  {}",
            i.id,
            i.tenant_id,
            i.status.as_str(),
            i.action,
            i.attempt_count,
            i.updated_at.format("%Y-%m-%d %H:%M:%S%.3f"),
            i.idempotency_key
        );
    }
    println!("{} intent(s)", intents.len());
    Ok(())
}

async fn audit(a: OpsAuditArgs, json_out: bool) -> CliResult {
    let pool = connect(&a.db, 1).await?;
    let rows = ops::audit_log(&pool, a.tenant.as_deref(), a.key.as_deref(), a.limit).await?;
    if json_out {
        println!("{}", json!(rows));
        return Ok(());
    }
    println!(
        "{:<23}  {:<16}  {:<6}  {:<4}  {:<8}  {:<27}  {:<12}  key / reason",
        "at", "actor", "role", "via", "action", "status", "tenant"
    );
    for r in &rows {
        println!(
            "{:<23}  {:<16}  {:<6}  {:<4}  {:<8}  {:<27}  {:<12}  {} / {}",
            r.at.format("%Y-%m-%d %H:%M:%S%.3f"),
            r.actor,
            r.role,
            r.via,
            r.action,
            format!("{} -> {}", r.status_before, r.status_after),
            r.tenant_id,
            r.idempotency_key,
            r.reason.as_deref().unwrap_or("-")
        );
    }
    println!("{} decision(s)", rows.len());
    Ok(())
}

async fn show(t: OpsTarget, json_out: bool) -> CliResult {
    let pool = connect(&t.db, 1).await?;
    let intent = ops::find(&pool, &t.key, t.tenant.as_deref()).await?;
    let history = ops::history(&pool, intent.id).await?;
    if json_out {
        println!("{}", json!({"intent": intent, "history": history}));
    } else {
        output::intent(&intent, false);
        print_history(&history);
    }
    Ok(())
}

fn print_history(history: &[AttemptRow]) {
    println!("  history:");
    for h in history {
        println!(
            "    #{:<3} {:<9} epoch {:<3} {:<24} {:<22} {}",
            h.attempt,
            h.phase_name(),
            h.epoch,
            h.worker,
            h.outcome.map_or("-", |k| k.as_str()),
            h.detail.as_deref().unwrap_or("")
        );
    }
}

async fn purge(a: OpsPurgeArgs, json_out: bool) -> CliResult {
    let older_than = a.older_than.get();
    if older_than < MIN_RETENTION {
        return Err(CliError::usage(
            "older_than",
            "--older-than must be at least 1d: a purged key can be reused, so retention must outlast every retry",
        ));
    }
    let pool = connect(&a.db, 1).await?;
    let removed = ops::purge(&pool, older_than).await?;
    if json_out {
        println!(
            "{}",
            json!({"purged": removed, "older_than_seconds": older_than.as_secs()})
        );
    } else {
        println!(
            "purged {removed} terminal intent(s) completed more than {} ago",
            a.older_than
        );
    }
    Ok(())
}

async fn token_create(a: TokenCreateArgs, json_out: bool) -> CliResult {
    oncebox_core::key::validate_token(&a.tenant, oncebox_core::intent::MAX_TENANT_LEN)
        .map_err(|e| CliError::usage("tenant", format!("tenant {e}")))?;
    let role: Role = a.role.parse().map_err(|e| CliError::usage("role", e))?;
    let pool = connect(&a.db, 1).await?;
    let lifetime = a.expires_in.map(NonZeroDuration::get);
    let (id, token) =
        tokens::create_token(&pool, &a.tenant, role, a.label.as_deref(), lifetime).await?;
    if json_out {
        println!(
            "{}",
            json!({"token": token, "id": id, "tenant": a.tenant, "role": role,
                   "label": a.label, "expires_in_seconds": lifetime.map(|d| d.as_secs())})
        );
    } else {
        println!("{token}");
        eprintln!("(shown once: store it now; oncebox keeps only its hash)");
    }
    Ok(())
}

async fn token_revoke(a: TokenRevokeArgs, json_out: bool) -> CliResult {
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

async fn token_list(a: TokenListArgs, json_out: bool) -> CliResult {
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
        "{:>6}  {:<12}  {:<5}  {:<16}  {:<16}  {:<16}  {:<16}  {:<16}",
        "id", "tenant", "role", "label", "created", "expires", "last used", "revoked"
    );
    for t in &list {
        println!(
            "{:>6}  {:<12}  {:<5}  {:<16}  {:<16}  {:<16}  {:<16}  {:<16}",
            t.id,
            t.tenant_id,
            t.role.as_str(),
            t.label.as_deref().unwrap_or("-"),
            when(Some(t.created_at)),
            when(t.expires_at),
            when(t.last_used_at),
            when(t.revoked_at),
        );
    }
    println!("{} token(s)", list.len());
    Ok(())
}

async fn stats(a: OpsStatsArgs, json_out: bool) -> CliResult {
    let pool = connect(&a.db, 1).await?;
    let stats = ops::stats(&mut *pool.acquire().await?).await?;
    let queues = match &a.amqp_url {
        Some(url) => Some(queue_depths(url, &a.dead_letter_exchange).await),
        None => None,
    };
    if json_out {
        println!("{}", json!({"stats": stats, "dead_letter_queues": queues}));
        return Ok(());
    }
    println!("intents by status:");
    for (s, n) in &stats.by_status {
        println!("  {:<14} {n:>10}", s.as_str());
    }
    println!("outbox by phase:");
    for (p, n) in &stats.outbox {
        println!("  {:<14} {n:>10}", p.as_str());
    }
    println!("oldest ready delivery: {:.1} s", stats.oldest_ready_seconds);
    match queues {
        Some(q) => {
            println!("dead-letter queues:");
            for (name, depth) in q {
                println!(
                    "  {name:<40} {}",
                    depth.map_or("unavailable".into(), |d| d.to_string())
                );
            }
        }
        None => println!("dead-letter queues: set AMQP_URL to read their depths"),
    }
    Ok(())
}

/// Finds the target, applies `f` (the transaction, the intent's id, the actor) in one
/// transaction, commits, prints the intent.
async fn change(
    c: &OpsChangeArgs,
    json_out: bool,
    f: impl AsyncFnOnce(&mut sqlx::PgConnection, i64, &ops::Actor) -> Result<Intent, OpsError>,
) -> CliResult {
    let t = &c.target;
    let pool = connect(&t.db, 1).await?;
    let target = ops::find(&pool, &t.key, t.tenant.as_deref()).await?;
    let mut tx = pool.begin().await?;
    let intent = f(&mut tx, target.id, &ops::Actor::new(&c.actor, "ops", "cli")).await?;
    tx.commit().await?;
    output::intent(&intent, json_out);
    Ok(())
}

/// Message counts of the dead-letter queues (passive declare: nothing is created).
pub(crate) async fn queue_depths(url: &str, exchange: &str) -> Vec<(String, Option<u32>)> {
    let conn = match lapin::Connection::connect(url, lapin::ConnectionProperties::default()).await {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "cannot reach RabbitMQ for the dead-letter queue depths");
            None
        }
    };
    let mut out = Vec::new();
    for reason in oncebox_worker::reasons() {
        let name = format!("{exchange}.{reason}");
        let depth = match &conn {
            Some(c) => queue_depth(c, &name).await,
            None => None,
        };
        out.push((name, depth));
    }
    if let Some(c) = conn
        && let Err(e) = c.close(200, "done".into()).await
    {
        tracing::debug!(error = %e, "closing the RabbitMQ connection failed");
    }
    out
}

async fn queue_depth(conn: &lapin::Connection, name: &str) -> Option<u32> {
    let channel = conn.create_channel().await.ok()?;
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .ok()
        .map(|q| q.message_count())
}
