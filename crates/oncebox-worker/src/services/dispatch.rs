//! From a claimed batch to calls under way: rows that need no call are completed at once, rows
//! for destinations that do not honour keys are marked dispatched first (only marked rows are
//! sent), and the rest are delivered with bounded concurrency, never inside a transaction.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use oncebox_core::config::RateLimitSettings;
use oncebox_core::protocol::ClaimedRow as ClaimedRowDecision;
use oncebox_core::retry::RetryAfter;
use oncebox_core::{AttemptError, AttemptKind, DeliveryOutcome, Status};
use oncebox_delivery::DeliveryRequest;
use oncebox_store::breaker::TokensWanted;
use oncebox_store::{ClaimedRow, Completion, Lease, Next, Phase, Report};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::breaker::Gate;
use crate::context::Context;
use crate::decisions::decide::{Attempted, decide};
use crate::routes::{Route, Routes};
use crate::services::completer::Outcomes;

/// What a claimed deliver row needs.
#[derive(Debug, PartialEq)]
pub(crate) enum Triage {
    /// No call: record this at once.
    Complete(Box<Completion>),
    /// Call the destination; `mark` first when it does not honour keys.
    Send {
        /// Mark the row dispatched (fenced) before calling.
        mark: bool,
    },
    /// No call and no attempt: give the lease back for this long (an intent awaiting approval,
    /// queued before its window closed).
    Hold(Duration),
}

/// Decides what a claimed deliver row needs before any call: a row finished while queued is
/// cleared; an intent still awaiting approval expires once its window closed, and is held back
/// before; an earlier attempt that was dispatched and never recorded is looked up or handed to
/// a person; a passed deadline expires the intent; an action no longer configured fails it.
pub(crate) fn triage(row: &ClaimedRow, routes: &Routes) -> Triage {
    let skip = |status: Status, next: Next, kind: AttemptKind, detail: &str| {
        no_call(row, status, next, kind, detail)
    };
    if row.status.is_terminal() {
        // Cancelled (or otherwise finished) while queued: never dispatched. Only cleared.
        return Triage::Complete(Box::new(Completion {
            lease: row.lease,
            phase: Phase::Deliver,
            attempt: row.attempt,
            status: row.status,
            response: None,
            external_reference: None,
            last_error: None,
            next: Next::Done,
            report: None,
        }));
    }
    if row.status == Status::AwaitingApproval {
        return awaiting_approval(row);
    }
    let Some(route) = routes.get(&row.action) else {
        return skip(
            Status::Failed,
            Next::Done,
            AttemptKind::PolicyRejected,
            &format!("action {:?} is not configured", row.action),
        );
    };
    const LOST: &str = "the worker that dispatched this attempt lost its lease before recording";
    let decided = oncebox_core::protocol::claimed_row(
        row.dispatched_at.is_some(),
        route.mode,
        row.deadline_passed,
    );
    match decided {
        ClaimedRowDecision::LookUp => skip(
            Status::Unknown,
            Next::Reconcile,
            AttemptKind::PreviousOutcomeUnknown,
            &format!("{LOST}; to be looked up"),
        ),
        ClaimedRowDecision::NeedsReview => skip(
            Status::NeedsReview,
            Next::Done,
            AttemptKind::PreviousOutcomeUnknown,
            &format!("{LOST}; no safe way to resolve it"),
        ),
        ClaimedRowDecision::Expire => skip(
            Status::Expired,
            Next::Done,
            AttemptKind::Expired,
            "the deadline passed before an attempt could start",
        ),
        ClaimedRowDecision::Send { mark } => Triage::Send { mark },
    }
}

/// A row recorded without a call: `status` and `next`, with a report of `kind` saying `detail`.
fn no_call(
    row: &ClaimedRow,
    status: Status,
    next: Next,
    kind: AttemptKind,
    detail: &str,
) -> Triage {
    Triage::Complete(Box::new(Completion {
        lease: row.lease,
        phase: Phase::Deliver,
        attempt: row.attempt,
        status,
        response: None,
        external_reference: None,
        last_error: kind
            .error_code()
            .map(|code| AttemptError::new(code, detail)),
        next,
        report: Some(Report {
            kind,
            status_code: None,
            error_code: None,
            detail: Some(detail.to_owned()),
            elapsed: Duration::ZERO,
        }),
    }))
}

/// The row of an intent still awaiting approval: its window closed (the one way a claim finds
/// it), so it expires, sending nothing; or, queued early, it is given back until the window's end.
fn awaiting_approval(row: &ClaimedRow) -> Triage {
    let left = row.approval_secs_left.unwrap_or(0.0);
    if left > 0.0 && !row.deadline_passed {
        return Triage::Hold(Duration::from_secs_f64(left.min(86_400.0 * 366.0)));
    }
    no_call(
        row,
        Status::Expired,
        Next::Done,
        AttemptKind::Expired,
        "it was not approved before its approval window closed",
    )
}

/// A claimed batch sorted by [`triage`] and the destinations' gates.
#[derive(Default)]
struct Sorted<'c> {
    /// Rows to call.
    to_send: Vec<ClaimedRow>,
    /// Intents to mark dispatched before their call (destinations that do not honour keys).
    marks: HashSet<i64>,
    /// Rows held back without an attempt (an open breaker, or awaiting approval), each with its
    /// wait.
    deferred: Vec<Lease>,
    /// The wait of each deferred row.
    waits: Vec<Duration>,
    /// Rows of disabled destinations, by destination.
    parked: HashMap<&'c str, Vec<Lease>>,
}

/// Sorts a claimed batch: completes at once the rows that need no call, and says which of the
/// rest to send, to defer or to park.
async fn sort<'c>(ctx: &'c Context, rows: Vec<ClaimedRow>, outcomes: &Outcomes) -> Sorted<'c> {
    let mut s = Sorted::default();
    for row in rows {
        let gated = match triage(&row, &ctx.routes) {
            Triage::Complete(c) => {
                send(outcomes, *c).await;
                continue;
            }
            Triage::Hold(wait) => ("", Gate::Defer(wait)),
            Triage::Send { mark } => {
                if mark {
                    s.marks.insert(row.intent_id());
                }
                gate(ctx, &row).await
            }
        };
        match gated {
            (_, Gate::Send) => s.to_send.push(row),
            (_, Gate::Defer(wait)) => {
                s.deferred.push(row.lease);
                s.waits.push(until_deadline(&row, wait));
            }
            (destination, Gate::Park) => s.parked.entry(destination).or_default().push(row.lease),
        }
    }
    s
}

/// Starts a claimed batch: completes the rows that need no call, marks the rest dispatched where
/// needed, and spawns their calls into `calls` as permits allow.
pub(crate) async fn start(
    ctx: &Arc<Context>,
    rows: Vec<ClaimedRow>,
    permits: &Arc<Semaphore>,
    outcomes: &Outcomes,
    calls: &mut JoinSet<()>,
) {
    let Sorted {
        to_send,
        marks,
        deferred,
        waits,
        parked,
    } = sort(ctx, rows, outcomes).await;
    defer_all(ctx, &deferred, &waits).await;
    for (destination, leases) in parked {
        park(ctx, destination, &leases).await;
    }
    let mut to_send = within_rates(ctx, to_send).await;
    // Only the rows still to be sent (not deferred for their rate) are marked.
    let to_mark: Vec<Lease> = to_send
        .iter()
        .filter(|r| marks.contains(&r.intent_id()))
        .map(|r| r.lease)
        .collect();
    if !to_mark.is_empty() {
        let marked = mark(ctx, &to_mark).await;
        let before = to_send.len();
        to_send.retain(|r| !marks.contains(&r.intent_id()) || marked.contains(&r.intent_id()));
        ctx.metrics.leases_lost(before - to_send.len());
    }
    for row in to_send {
        let Some(route) = ctx.routes.get(&row.action).cloned() else {
            continue;
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (ctx2, outcomes) = (ctx.clone(), outcomes.clone());
        let span = tracing::info_span!(
            "delivery",
            tenant = %row.tenant_id,
            intent_id = row.intent_id(),
            key = %row.idempotency_key,
            attempt = row.attempt + 1
        );
        let lease = row.lease;
        ctx.in_flight.start(lease, || {
            calls.spawn(tracing::Instrument::instrument(
                async move {
                    let _permit = permit;
                    let completion = call(&ctx2, &route, &row).await;
                    ctx2.in_flight.finish(row.intent_id());
                    send(&outcomes, completion).await;
                },
                span,
            ))
        });
    }
}

/// Whether `row` may be sent now, and its destination: its destination may be disabled (every
/// destination, of every kind) or, with a circuit breaker, open.
async fn gate<'c>(ctx: &'c Context, row: &ClaimedRow) -> (&'c str, Gate) {
    let Some(route) = ctx.routes.get(&row.action) else {
        return ("", Gate::Send);
    };
    let name = route.destination.name();
    let gate = ctx
        .breakers
        .gate(&ctx.pool, name, route.breaker.as_ref())
        .await;
    (name, gate)
}

/// `wait`, cut short so that the row is looked at again by its intent's deadline (which then
/// expires it) rather than after it.
fn until_deadline(row: &ClaimedRow, wait: Duration) -> Duration {
    let left = row.deadline.map(|d| {
        SystemTime::from(d)
            .duration_since(SystemTime::now())
            .unwrap_or_default()
    });
    left.map_or(wait, |left| wait.min(left))
}

/// Parks `leases` of the disabled `destination` without an attempt. A failure is logged: the
/// rows then wait for their leases to expire.
async fn park(ctx: &Context, destination: &str, leases: &[Lease]) {
    let parked = oncebox_store::breaker::park(
        &ctx.pool,
        &ctx.settings.id,
        leases,
        destination,
        crate::breaker::PARKED_WAIT,
    );
    match parked.await {
        Ok(_) => tracing::debug!(
            destination,
            n = leases.len(),
            "parked: the destination is disabled"
        ),
        Err(e) => {
            tracing::warn!(error = %e, destination, "parking deliveries of a disabled destination failed; their leases will expire");
        }
    }
}

/// Gives `leases` back without an attempt, each waiting its own delay.
async fn defer_all(ctx: &Context, leases: &[Lease], waits: &[Duration]) {
    if leases.is_empty() {
        return;
    }
    let deferred =
        oncebox_store::defer(&ctx.pool, &ctx.settings.id, Phase::Deliver, leases, waits).await;
    if let Err(e) = deferred {
        tracing::warn!(error = %e, "deferring a held-back delivery failed; its lease will expire");
    }
}

/// The rows their destinations' pool-wide rates let go now; the others are deferred without an
/// attempt, the i-th of a destination's excess for i more tokens' time after the next one.
async fn within_rates(ctx: &Context, rows: Vec<ClaimedRow>) -> Vec<ClaimedRow> {
    let mut out = Vec::with_capacity(rows.len());
    let mut limited: HashMap<String, (RateLimitSettings, Vec<ClaimedRow>)> = HashMap::new();
    for row in rows {
        let limit = ctx.routes.get(&row.action).and_then(|r| {
            r.rate_limit
                .clone()
                .map(|l| (r.destination.name().to_owned(), l))
        });
        match limit {
            Some((name, l)) => limited.entry(name).or_insert((l, Vec::new())).1.push(row),
            None => out.push(row),
        }
    }
    if limited.is_empty() {
        return out;
    }
    let wanted: Vec<TokensWanted> = limited
        .iter()
        .map(|(name, (limit, rows))| TokensWanted {
            destination: name.clone(),
            n: rows.len(),
            per_second: limit.per_second,
            burst: limit.burst(),
        })
        .collect();
    let mut taken = match oncebox_store::breaker::take_tokens(&ctx.pool, &wanted).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(error = %e, "taking rate tokens failed");
            HashMap::new()
        }
    };
    let (mut deferred, mut waits) = (Vec::new(), Vec::new());
    for (name, (limit, rows)) in limited {
        let (n, wait) = taken.remove(&name).unwrap_or((0, Duration::from_secs(1)));
        let mut rows = rows.into_iter();
        out.extend(rows.by_ref().take(n));
        for (i, row) in rows.enumerate() {
            deferred.push(row.lease);
            waits.push(wait + Duration::from_secs_f64(i as f64 / limit.per_second));
        }
    }
    defer_all(ctx, &deferred, &waits).await;
    out
}

/// Marks `leases` dispatched (fenced); the intents marked. A failure is logged and marks
/// nothing: those rows wait for their lease to expire.
async fn mark(ctx: &Context, leases: &[Lease]) -> HashSet<i64> {
    match oncebox_store::mark_dispatched(&ctx.pool, &ctx.settings.id, leases).await {
        Ok(ids) => ids.into_iter().collect(),
        Err(e) => {
            tracing::warn!(error = %e, "dispatch mark failed; those deliveries wait for their lease to expire");
            HashSet::new()
        }
    }
}

/// One attempt: the call, its metrics, and the decision on its outcome.
async fn call(ctx: &Context, route: &Route, row: &ClaimedRow) -> Completion {
    let _destination_slot = match &route.limit {
        Some(l) => l.clone().acquire_owned().await.ok(),
        None => None,
    };
    let attempt = row.attempt + 1;
    let key = row.delivery_key();
    let req = DeliveryRequest {
        tenant_id: &row.tenant_id,
        delivery_key: &key,
        action: &row.action,
        attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
        request_hash: &row.request_hash,
        arguments: row.delivery_arguments(),
    };
    let started = Instant::now();
    let outcome = route.destination.deliver(&req, ctx.settings.lease()).await;
    let elapsed = started.elapsed();
    if let Some(settings) = &route.breaker {
        let name = route.destination.name();
        ctx.breakers
            .report(&ctx.pool, name, settings, &outcome)
            .await;
    }
    if route.rate_limit.is_some() {
        slow_down_on_retry_after(ctx, route.destination.name(), &outcome).await;
    }
    crate::crash::point("after_call").await;
    ctx.metrics.delivered(
        route.destination.name(),
        outcome.class().as_str(),
        elapsed.as_secs_f64(),
    );
    let attempted = Attempted {
        lease: row.lease,
        attempt,
        budget_from: row.budget_from,
        deadline: row.deadline.map(SystemTime::from),
        elapsed,
    };
    decide(
        &attempted,
        &outcome,
        &route.policy,
        route.mode,
        SystemTime::now(),
        &mut || fastrand::f64(),
    )
}

/// A 429 or 503 with Retry-After from a rate-limited destination pauses it for the whole pool.
async fn slow_down_on_retry_after(ctx: &Context, name: &str, outcome: &DeliveryOutcome) {
    let DeliveryOutcome::RetryBeforeExecution {
        error,
        retry_after: Some(after),
    } = outcome
    else {
        return;
    };
    if !matches!(error.status_code, Some(429 | 503)) {
        return;
    }
    let delay = match after {
        RetryAfter::Delay(d) => *d,
        RetryAfter::At(t) => t
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    };
    let delay = delay.min(Duration::from_secs(3600));
    if let Err(e) = oncebox_store::breaker::slow_down(&ctx.pool, name, delay).await {
        tracing::warn!(error = %e, destination = name, "pausing a rate-limited destination failed");
    }
}

/// Hands a completion to the completer; logs when it is gone (the worker is stopping and the
/// lease will expire instead).
pub(crate) async fn send(outcomes: &Outcomes, c: Completion) {
    let intent_id = c.lease.intent_id;
    if outcomes.send(c).await.is_err() {
        tracing::error!(
            intent_id,
            "the completer is gone: this outcome is not recorded, the lease will expire"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claimed deliver row of an intent awaiting approval, with `left` seconds of its window.
    fn awaiting(left: Option<f64>, deadline_passed: bool) -> ClaimedRow {
        ClaimedRow {
            deadline_passed,
            approval_secs_left: left,
            ..crate::testing::claimed_row("k", Status::AwaitingApproval)
        }
    }

    /// A worker that reaches an intent still awaiting approval before its window closes sends
    /// nothing and spends no attempt: it gives the row back until the window's end. Once the
    /// window closed, or the deadline passed, the intent expires without a call.
    #[test]
    fn an_intent_awaiting_approval_is_held_until_its_window_closes_then_expired() {
        let routes = Routes::default();
        assert_eq!(
            triage(&awaiting(Some(30.0), false), &routes),
            Triage::Hold(Duration::from_secs(30))
        );
        for closed in [
            awaiting(Some(0.0), false),
            awaiting(Some(-5.0), false),
            awaiting(None, false),
            awaiting(Some(30.0), true),
        ] {
            match triage(&closed, &routes) {
                Triage::Complete(c) => {
                    assert_eq!(c.status, Status::Expired);
                    assert_eq!(c.next, Next::Done);
                    assert_eq!(c.report.map(|r| r.kind), Some(AttemptKind::Expired));
                }
                other => panic!("{closed:?}: {other:?}"),
            }
        }
    }
}
