//! The demo's agents: each records an order and its intent in one transaction, surviving the
//! fault chosen for it — a connection cut before commit, an answer lost after commit, a race
//! with a second agent on the same key, or a key reused with other arguments (an agent bug).

use std::sync::atomic::{AtomicUsize, Ordering};

use oncebox_core::{IntentNames, NewIntent};
use oncebox_store::{Intake, SubmitError, Submitted};
use serde_json::json;
use sqlx::PgPool;

use super::queries;

/// What the agents did and saw.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) calls: AtomicUsize,
    pub(super) created: AtomicUsize,
    pub(super) replayed: AtomicUsize,
    pub(super) conflicts: AtomicUsize,
    pub(super) cut: AtomicUsize,
    pub(super) answers_dropped: AtomicUsize,
    pub(super) wrong_replay: AtomicUsize,
}

/// Reads a counter.
pub(super) fn n(a: &AtomicUsize) -> usize {
    a.load(Ordering::Relaxed)
}

fn bump(a: &AtomicUsize) {
    a.fetch_add(1, Ordering::Relaxed);
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

/// The intent of order `i`: an invoice, a document filed at the archive (every third), or an
/// event published over RabbitMQ; some billing calls are answered 503 at first.
pub(super) fn intent_for(i: usize) -> NewIntent {
    let action = if i % 3 == 1 {
        "file_document"
    } else if i % 5 == 3 {
        "publish_event"
    } else {
        "create_invoice"
    };
    let mut arguments = json!({"order_id": format!("order-{i}"), "amount": format!("{}.00", 100 + i),
                               "customer": {"email": format!("buyer{i}@example.com")}});
    if i.is_multiple_of(7) {
        // The billing system is busy at first: 503 with Retry-After: 1.
        arguments["faults"] = json!(["503:1", "ok"]);
    }
    NewIntent {
        business_ref: Some(format!("order-{i}")),
        run_id: Some(format!("run-{}", i % 7)),
        ..NewIntent::new(
            IntentNames {
                tenant_id: "tenant-demo",
                idempotency_key: &format!("invoice-order-{i}"),
                action,
            },
            arguments,
        )
    }
}

/// One agent's work for order `i`: records the order and its intent together, surviving the
/// fault chosen for `i`. Returns once the intent is known to be recorded.
pub(super) async fn run_intent(
    pool: &PgPool,
    intake: &Intake,
    tally: &Tally,
    i: usize,
) -> anyhow::Result<()> {
    let fault = fault_for(i);
    let mut first_id = None;
    let mut inject = fault != Fault::None;
    loop {
        let Some(submitted) = commit_order(
            pool,
            intake,
            tally,
            i,
            inject && fault == Fault::CutBeforeCommit,
        )
        .await?
        else {
            inject = false;
            continue;
        };
        bump(if submitted.created {
            &tally.created
        } else {
            &tally.replayed
        });
        if first_id.is_some_and(|id| id != submitted.intent.id) {
            bump(&tally.wrong_replay);
        }
        first_id = Some(submitted.intent.id);
        match (inject, fault) {
            (true, Fault::AnswerLost) => {
                bump(&tally.answers_dropped);
                inject = false;
                continue;
            }
            (true, Fault::Race) => race(pool, intake, tally, i, &submitted).await?,
            (true, Fault::KeyReuse) => reuse_key(pool, intake, tally, i).await?,
            _ => {}
        }
        return Ok(());
    }
}

/// Records order `i` and its intent in one transaction; with `cut`, the server ends the
/// connection before the commit (and `None` says the agent must try again).
async fn commit_order(
    pool: &PgPool,
    intake: &Intake,
    tally: &Tally,
    i: usize,
    cut: bool,
) -> anyhow::Result<Option<Submitted>> {
    let mut conn = pool.acquire().await?;
    let pid: i32 = sqlx::query_scalar(queries::BACKEND_PID)
        .fetch_one(&mut *conn)
        .await?;
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    sqlx::query(queries::ORDER)
        .bind(format!("order-{i}"))
        .bind(format!("{}.00", 100 + i))
        .bind(format!("invoice-order-{i}"))
        .execute(&mut *tx)
        .await?;
    bump(&tally.calls);
    let submitted = intake.submit(&mut tx, intent_for(i)).await?;
    if cut {
        sqlx::query(queries::TERMINATE)
            .bind(pid)
            .execute(pool)
            .await?;
        anyhow::ensure!(
            tx.commit().await.is_err(),
            "order-{i}: commit succeeded on a terminated connection"
        );
        conn.detach();
        bump(&tally.cut);
        return Ok(None);
    }
    tx.commit().await?;
    Ok(Some(submitted))
}

/// A second agent, unaware of the first, submits the same key twice at once.
async fn race(
    pool: &PgPool,
    intake: &Intake,
    tally: &Tally,
    i: usize,
    first: &Submitted,
) -> anyhow::Result<()> {
    let (a, b) = tokio::join!(
        submit_alone(pool, intake, intent_for(i)),
        submit_alone(pool, intake, intent_for(i))
    );
    for s in [a?, b?] {
        bump(&tally.calls);
        bump(&tally.replayed);
        if s.intent.id != first.intent.id || s.created {
            bump(&tally.wrong_replay);
        }
    }
    Ok(())
}

/// The agent reuses its key with other arguments: refused as a conflict.
async fn reuse_key(pool: &PgPool, intake: &Intake, tally: &Tally, i: usize) -> anyhow::Result<()> {
    let mut other = intent_for(i);
    other.arguments["amount"] = json!("0.01");
    bump(&tally.calls);
    match submit_alone(pool, intake, other).await {
        Err(e)
            if matches!(
                e.downcast_ref::<SubmitError>(),
                Some(SubmitError::KeyConflict { .. })
            ) =>
        {
            bump(&tally.conflicts);
            Ok(())
        }
        Err(e) => Err(e),
        Ok(_) => anyhow::bail!("order-{i}: a reused key with other arguments was accepted"),
    }
}

async fn submit_alone(
    pool: &PgPool,
    intake: &Intake,
    intent: NewIntent,
) -> anyhow::Result<Submitted> {
    let mut tx = pool.begin().await?;
    let s = intake.submit(&mut tx, intent).await?;
    tx.commit().await?;
    Ok(s)
}
