//! `oncebox demo`: the main job, end to end, with faults injected.
//!
//! Agents record orders and their `create_invoice` intents in one transaction each, while the
//! demo cuts their database connections before commit, drops answers after commit (the agent
//! retries with the same key), races two agents on one key, and reuses keys with other
//! arguments. It then counts what the database holds: one journal row, one outbox row and one
//! business row per intent — no duplicate, nothing lost — and exits non-zero otherwise.
//!
//! Delivery to receivers joins this demo with the worker (DESIGN §5 Claim…Record).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::Context;
use oncebox_core::NewIntent;
use oncebox_core::config::Config;
use oncebox_store::{Intake, SubmitError};
use serde_json::json;
use sqlx::{PgPool, Row};

use crate::cli::DemoArgs;
use crate::exit::{CliError, CliResult};
use crate::scratch::ScratchDb;

const DEMO_CONFIG: &str = r#"
[actions.create_invoice]
destination = "billing"
redact = [{ pointer = "/customer/email", mode = "hash" }]

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/invoices"
idempotency = "key"
"#;

/// What the agents did and saw.
#[derive(Default)]
struct Tally {
    calls: AtomicUsize,
    created: AtomicUsize,
    replayed: AtomicUsize,
    conflicts: AtomicUsize,
    cut: AtomicUsize,
    answers_dropped: AtomicUsize,
    wrong_replay: AtomicUsize,
}

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// The agent's connection is terminated by the server before commit.
    CutBeforeCommit,
    /// The commit succeeds but its answer is lost: the agent retries.
    AnswerLost,
    /// Two agents submit the same key at once.
    Race,
    /// After success the agent reuses the key with other arguments (an agent bug).
    KeyReuse,
}

fn fault_for(i: usize) -> Fault {
    match i % 10 {
        1 | 6 => Fault::CutBeforeCommit,
        2 | 7 => Fault::AnswerLost,
        3 => Fault::Race,
        4 => Fault::KeyReuse,
        _ => Fault::None,
    }
}

pub(crate) async fn run(args: DemoArgs, json_out: bool) -> CliResult {
    if args.intents == 0 || args.agents == 0 {
        return Err(CliError::usage(
            "intents",
            "--intents and --agents must be at least 1",
        ));
    }
    let started = Instant::now();
    let scratch = ScratchDb::create(&args.database_url, &args.database_name).await?;
    let config = Config::from_toml(DEMO_CONFIG)
        .map_err(|e| CliError::Other(anyhow::anyhow!("demo config: {e}")))?;
    let intake = Intake::new(&config);
    let pool = scratch
        .pool(u32::try_from(args.agents * 2 + 2).unwrap_or(64))
        .await?;
    sqlx::query("CREATE TABLE demo_orders (order_id text PRIMARY KEY, amount text NOT NULL, invoice_key text NOT NULL)")
        .execute(&pool)
        .await?;

    let tally = Arc::new(Tally::default());
    let mut agents = Vec::new();
    for agent in 0..args.agents {
        let (pool, intake, tally) = (pool.clone(), intake.clone(), tally.clone());
        let n = args.intents;
        let count = args.agents;
        agents.push(tokio::spawn(async move {
            for i in (agent..n).step_by(count) {
                run_intent(&pool, &intake, &tally, i).await?;
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    for a in agents {
        a.await.context("an agent panicked")??;
    }

    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM oncebox.intents) AS journal,
                (SELECT count(*) FROM oncebox.outbox) AS outbox,
                (SELECT count(*) FROM demo_orders) AS orders,
                (SELECT count(*) FROM demo_orders o
                   WHERE NOT EXISTS (SELECT 1 FROM oncebox.intents i WHERE i.idempotency_key = o.invoice_key)) AS orphans,
                (SELECT count(*) FROM oncebox.intents WHERE payload::text LIKE '%@example.com%') AS unredacted,
                (SELECT count(*) FROM oncebox.intents WHERE status = 'pending') AS pending",
    )
    .fetch_one(&pool)
    .await?;
    let get = |c: &str| row.get::<i64, _>(c) as usize;
    let (journal, outbox, orders, orphans, unredacted, pending) = (
        get("journal"),
        get("outbox"),
        get("orders"),
        get("orphans"),
        get("unredacted"),
        get("pending"),
    );
    let n = args.intents;
    let duplicates = journal.saturating_sub(n)
        + outbox.saturating_sub(n)
        + tally.wrong_replay.load(Ordering::Relaxed);
    let lost =
        n.saturating_sub(journal) + n.saturating_sub(outbox) + n.saturating_sub(orders) + orphans;
    let t = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let ok = duplicates == 0 && lost == 0 && unredacted == 0;

    if json_out {
        println!(
            "{}",
            json!({
                "intents": n, "agents": args.agents, "submit_calls": t(&tally.calls),
                "created": t(&tally.created), "replayed": t(&tally.replayed),
                "conflicts_refused": t(&tally.conflicts), "connections_cut": t(&tally.cut),
                "answers_dropped": t(&tally.answers_dropped),
                "journal_rows": journal, "outbox_rows": outbox, "business_rows": orders,
                "by_status": {"pending": pending}, "unredacted": unredacted,
                "duplicates": duplicates, "lost": lost, "ok": ok,
                "seconds": started.elapsed().as_secs_f64(),
            })
        );
    } else {
        println!(
            "oncebox demo — {n} intents from {} agents, faults injected",
            args.agents
        );
        let rows: [(&str, usize); 12] = [
            ("submit calls (with retries)", t(&tally.calls)),
            ("  created", t(&tally.created)),
            ("  replayed (same key, same request)", t(&tally.replayed)),
            ("  refused: key reused, other request", t(&tally.conflicts)),
            ("  connections cut before commit", t(&tally.cut)),
            ("  answers dropped after commit", t(&tally.answers_dropped)),
            ("journal rows", journal),
            ("outbox rows", outbox),
            ("business rows (same transactions)", orders),
            ("  pending (delivery: see README)", pending),
            ("duplicates", duplicates),
            ("lost", lost),
        ];
        for (k, v) in rows {
            println!("  {k:<38} {v:>6}");
        }
        println!(
            "  {:<38} {:>6}\n{} in {:.1} s (database {} {})",
            "payloads with an email in clear",
            unredacted,
            if ok { "OK" } else { "FAILED" },
            started.elapsed().as_secs_f64(),
            scratch.name,
            if args.keep { "kept" } else { "dropped" }
        );
    }
    pool.close().await;
    if !args.keep {
        scratch.drop_db().await?;
    }
    if ok {
        Ok(())
    } else {
        Err(CliError::Other(anyhow::anyhow!(
            "{duplicates} duplicates, {lost} lost, {unredacted} unredacted"
        )))
    }
}

fn intent_for(i: usize) -> NewIntent {
    NewIntent {
        business_ref: Some(format!("order-{i}")),
        run_id: Some(format!("run-{}", i % 7)),
        ..NewIntent::new(
            "tenant-demo",
            format!("invoice-order-{i}"),
            "create_invoice",
            json!({"order_id": format!("order-{i}"), "amount": format!("{}.00", 100 + i),
                   "customer": {"email": format!("buyer{i}@example.com")}}),
        )
    }
}

/// One agent's work for order `i`: record the order and its intent together, surviving the
/// fault chosen for `i`. Returns once the intent is known to be recorded.
async fn run_intent(pool: &PgPool, intake: &Intake, tally: &Tally, i: usize) -> anyhow::Result<()> {
    let fault = fault_for(i);
    let mut first_id = None;
    let mut tries = 0;
    loop {
        tries += 1;
        let inject = tries == 1 && fault != Fault::None;
        let mut conn = pool.acquire().await?;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *conn)
            .await?;
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        sqlx::query(
            "INSERT INTO demo_orders VALUES ($1, $2, $3) ON CONFLICT (order_id) DO NOTHING",
        )
        .bind(format!("order-{i}"))
        .bind(format!("{}.00", 100 + i))
        .bind(format!("invoice-order-{i}"))
        .execute(&mut *tx)
        .await?;
        tally.calls.fetch_add(1, Ordering::Relaxed);
        let submitted = intake.submit(&mut tx, intent_for(i)).await?;
        if inject && fault == Fault::CutBeforeCommit {
            sqlx::query("SELECT pg_terminate_backend($1, 5000)")
                .bind(pid)
                .execute(pool)
                .await?;
            let commit = tx.commit().await;
            anyhow::ensure!(
                commit.is_err(),
                "order-{i}: commit succeeded on a terminated connection"
            );
            conn.detach();
            tally.cut.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        tx.commit().await?;
        if submitted.created {
            tally.created.fetch_add(1, Ordering::Relaxed);
        } else {
            tally.replayed.fetch_add(1, Ordering::Relaxed);
        }
        if first_id.is_some_and(|id| id != submitted.intent.id) {
            tally.wrong_replay.fetch_add(1, Ordering::Relaxed);
        }
        first_id = Some(submitted.intent.id);
        if inject && fault == Fault::AnswerLost {
            tally.answers_dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if inject && fault == Fault::Race {
            // A second agent, unaware of the first, submits the same key concurrently.
            let (a, b) = tokio::join!(
                submit_alone(pool, intake, intent_for(i)),
                submit_alone(pool, intake, intent_for(i))
            );
            for s in [a?, b?] {
                tally.calls.fetch_add(1, Ordering::Relaxed);
                tally.replayed.fetch_add(1, Ordering::Relaxed);
                if s.intent.id != submitted.intent.id || s.created {
                    tally.wrong_replay.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if inject && fault == Fault::KeyReuse {
            let mut other = intent_for(i);
            other.arguments["amount"] = json!("0.01");
            tally.calls.fetch_add(1, Ordering::Relaxed);
            match submit_alone(pool, intake, other).await {
                Err(e)
                    if matches!(
                        e.downcast_ref::<SubmitError>(),
                        Some(SubmitError::KeyConflict { .. })
                    ) =>
                {
                    tally.conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => return Err(e),
                Ok(_) => anyhow::bail!("order-{i}: a reused key with other arguments was accepted"),
            }
        }
        return Ok(());
    }
}

async fn submit_alone(
    pool: &PgPool,
    intake: &Intake,
    intent: NewIntent,
) -> anyhow::Result<oncebox_store::Submitted> {
    let mut tx = pool.begin().await?;
    let s = intake.submit(&mut tx, intent).await?;
    tx.commit().await?;
    Ok(s)
}
