//! One worker: claim → (dispatch mark) → deliver → record, with lease renewal, wake-ups by
//! LISTEN/NOTIFY plus polling, and a graceful shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use backon::{ExponentialBuilder, Retryable};
use oncebox_core::config::IdempotencyMode;
use oncebox_core::{DeliveryOutcome, Status};
use oncebox_delivery::DeliveryRequest;
use oncebox_store::{ClaimedRow, Completion, Next, Phase, Report};
use serde_json::json;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::{AbortHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::decide::{Attempted, decide};
use crate::metrics::Metrics;
use crate::routes::Routes;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// This worker's name: the lease owner, in logs and the retry report.
    pub id: String,
    /// Deliveries in flight at once.
    pub concurrency: usize,
    /// Rows per claim, at most.
    pub batch: usize,
    /// Lease length; must exceed every destination's timeout.
    pub lease: Duration,
    /// Poll for work this often when no notification arrives.
    pub poll_interval: Duration,
    /// On shutdown, wait this long for in-flight deliveries before releasing them.
    pub grace: Duration,
    /// Completions recorded per statement, at most.
    pub record_batch: usize,
    /// While work keeps arriving, look again this soon after an empty claim (no NOTIFY needed).
    pub busy_poll: Duration,
    /// After this long without work, register as waiting and sleep on LISTEN instead.
    pub idle_after: Duration,
    /// RabbitMQ URL for dead letters; without it they wait in the outbox.
    pub amqp_url: Option<String>,
    /// The dead-letter exchange; queues are `<exchange>.<reason>`.
    pub dead_letter_exchange: String,
    /// Claim deliveries (default); false runs only reconciliation and dead letters.
    pub deliver: bool,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings {
            id: "worker".into(),
            concurrency: 64,
            batch: 100,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_millis(500),
            grace: Duration::from_secs(10),
            record_batch: 256,
            busy_poll: Duration::from_millis(2),
            idle_after: Duration::from_secs(1),
            amqp_url: None,
            dead_letter_exchange: "oncebox.dead-letter".into(),
            deliver: true,
        }
    }
}

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The settings cannot work.
    #[error("{0}")]
    Settings(String),
    /// The database failed in a way the worker does not ride out (start-up).
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
}

type InFlight = Arc<Mutex<HashMap<i64, (i64, AbortHandle)>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

use crate::metrics::now_ms;

/// Runs one worker until `cancel`, then finishes or releases its in-flight work within the
/// grace period and returns.
///
/// # Errors
/// [`WorkerError::Settings`] when the lease does not exceed every destination timeout by 2 s;
/// [`WorkerError::Database`] when the LISTEN connection cannot be opened at start-up. Database
/// errors later are logged and ridden out (polling, retries); leases protect the work meanwhile.
pub async fn run(
    pool: PgPool,
    routes: Routes,
    settings: WorkerSettings,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) -> Result<(), WorkerError> {
    if settings.lease < routes.longest_timeout() + Duration::from_secs(2) {
        return Err(WorkerError::Settings(format!(
            "the lease ({:?}) must exceed the longest destination timeout ({:?}) by at least 2 s",
            settings.lease,
            routes.longest_timeout()
        )));
    }
    let settings = Arc::new(settings);
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen(oncebox_store::OUTBOX_CHANNEL).await?;

    let permits = Arc::new(Semaphore::new(settings.concurrency));
    let (done_tx, done_rx) = mpsc::channel::<Completion>(settings.concurrency.max(16) * 2);
    let in_flight: InFlight = Arc::default();
    let completer = tokio::spawn(complete(
        pool.clone(),
        settings.clone(),
        done_rx,
        in_flight.clone(),
    ));
    let renewer_stop = CancellationToken::new();
    let renewer = tokio::spawn(renew(
        pool.clone(),
        settings.clone(),
        in_flight.clone(),
        metrics.clone(),
        renewer_stop.clone(),
    ));
    let gauges = tokio::spawn(gauges(pool.clone(), metrics.clone(), renewer_stop.clone()));
    let notifier = settings.amqp_url.clone().map(|url| {
        tokio::spawn(crate::dead_letter::notify_loop(
            pool.clone(),
            settings.clone(),
            url,
            cancel.clone(),
        ))
    });
    if notifier.is_none() {
        tracing::warn!("no AMQP URL: dead letters are queued in the outbox but not published");
    }
    let reconciler = tokio::spawn(reconcile_loop(
        pool.clone(),
        routes.clone(),
        settings.clone(),
        done_tx.clone(),
        metrics.clone(),
        cancel.clone(),
    ));
    let mut tasks = JoinSet::new();
    let mut waiting = false;
    let mut last_work = Instant::now();
    tracing::info!(worker = %settings.id, concurrency = settings.concurrency, "worker started");

    if !settings.deliver {
        tracing::info!(worker = %settings.id, "reconciliation and dead letters only: no deliveries claimed");
        cancel.cancelled().await;
    }
    while !cancel.is_cancelled() {
        metrics.heartbeat("deliver", now_ms());
        while tasks.try_join_next().is_some() {}
        // Claim in worthwhile batches: with work in flight, wait until half a batch of slots is
        // free (or a few milliseconds have passed), so a steady drain does not become a stream
        // of one-row claims, each its own commit.
        let want = settings.batch.min(settings.concurrency).div_ceil(2);
        let free = permits.available_permits().min(settings.batch);
        if free == 0 || (free < want && !tasks.is_empty()) {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tasks.join_next() => {}
                _ = tokio::time::sleep(Duration::from_millis(2)), if free > 0 => {}
            }
            continue;
        }
        let claimed = match pool.acquire().await {
            Ok(mut conn) => {
                oncebox_store::claim(
                    &mut conn,
                    Phase::Deliver,
                    &settings.id,
                    free as i64,
                    settings.lease,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let rows = match claimed {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "claim failed; retrying after the poll interval");
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(settings.poll_interval) => {}
                }
                continue;
            }
        };
        if rows.is_empty() {
            if last_work.elapsed() < settings.idle_after {
                // Work arrived recently: poll tightly rather than make every submit NOTIFY
                // (notifying commits serialise cluster-wide). An empty claim writes nothing.
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(settings.busy_poll) => {}
                }
                continue;
            }
            if !waiting {
                // Register, then claim once more: a row committed before the registration was
                // visible is found now rather than at the next poll.
                waiting = register(&pool, &settings.id, true).await;
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                n = listener.recv() => {
                    if let Err(e) = n {
                        tracing::warn!(error = %e, "LISTEN connection lost; polling until it is back");
                        tokio::time::sleep(settings.poll_interval).await;
                    }
                }
                _ = tokio::time::sleep(settings.poll_interval) => {
                    register(&pool, &settings.id, true).await;
                }
            }
            continue;
        }
        crash_point("after_claim").await;
        last_work = Instant::now();
        if waiting {
            waiting = !register(&pool, &settings.id, false).await;
        }
        metrics.claimed(rows.len());
        start_batch(
            rows, &pool, &routes, &settings, &permits, &done_tx, &in_flight, &metrics, &mut tasks,
        )
        .await;
    }

    // Shutdown: no more claims; let in-flight deliveries finish within the grace period.
    metrics.loop_ended("deliver");
    tracing::info!(worker = %settings.id, in_flight = tasks.len(), "stopping: finishing in-flight deliveries");
    let deadline = tokio::time::sleep(settings.grace);
    tokio::pin!(deadline);
    while !tasks.is_empty() {
        tokio::select! {
            _ = &mut deadline => break,
            _ = tasks.join_next() => {}
        }
    }
    let unfinished: Vec<(i64, i64)> = lock(&in_flight)
        .iter()
        .map(|(id, (epoch, _))| (*id, *epoch))
        .collect();
    tasks.abort_all();
    let _ = reconciler.await;
    if let Some(n) = notifier {
        let _ = n.await;
    }
    drop(done_tx);
    let _ = completer.await;
    if !unfinished.is_empty()
        && let Ok(mut conn) = pool.acquire().await
    {
        match oncebox_store::release(&mut conn, &settings.id, Phase::Deliver, &unfinished).await {
            Ok(released) => {
                tracing::info!(released = released.len(), "released unfinished deliveries")
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not release leases; they expire by themselves")
            }
        }
    }
    renewer_stop.cancel();
    let _ = renewer.await;
    let _ = gauges.await;
    register(&pool, &settings.id, false).await;
    tracing::info!(worker = %settings.id, "worker stopped");
    Ok(())
}

/// Claims reconcile-phase rows and looks their effects up, batch by batch, until `cancel`.
/// Reconciliation is not latency-critical: it polls, and each row's `available_at` carries its
/// own backoff.
async fn reconcile_loop(
    pool: PgPool,
    routes: Routes,
    settings: Arc<WorkerSettings>,
    done: mpsc::Sender<Completion>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    while !cancel.is_cancelled() {
        metrics.heartbeat("reconcile", now_ms());
        let claimed = match pool.acquire().await {
            Ok(mut conn) => {
                oncebox_store::claim(
                    &mut conn,
                    Phase::Reconcile,
                    &settings.id,
                    32,
                    settings.lease,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let rows = match claimed {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "reconcile claim failed");
                Vec::new()
            }
        };
        if rows.is_empty() {
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = tokio::time::sleep(settings.poll_interval) => {}
            }
            continue;
        }
        let leases: Vec<(i64, i64)> = rows.iter().map(|r| (r.intent_id, r.epoch)).collect();
        let marked: std::collections::HashSet<i64> = match pool.acquire().await {
            Ok(mut conn) => oncebox_store::mark_reconciling(&mut conn, &settings.id, &leases)
                .await
                .unwrap_or_default(),
            Err(_) => Default::default(),
        }
        .into_iter()
        .collect();
        let mut lookups = JoinSet::new();
        for row in rows.into_iter().filter(|r| marked.contains(&r.intent_id)) {
            let route = routes.get(&row.action).cloned();
            let done = done.clone();
            let span = tracing::info_span!("reconcile", tenant = %row.tenant_id, intent_id = row.intent_id, key = %row.idempotency_key);
            lookups.spawn(tracing::Instrument::instrument(
                async move {
                    let started = Instant::now();
                    let window = route.as_ref().map_or(Duration::ZERO, |r| r.consistency_window);
                    let lookup = route.as_ref().and_then(|r| r.lookup.clone());
                    let result = match &lookup {
                        Some(l) => Some(l.lookup(&row.idempotency_key, row.external_reference.as_deref()).await),
                        None => None,
                    };
                    let url = lookup.as_ref().map(|l| l.url(&row.idempotency_key, row.external_reference.as_deref()));
                    let r = crate::reconcile::Reconciling {
                        intent_id: row.intent_id,
                        epoch: row.epoch,
                        attempt: row.attempt,
                        dispatched_at: row.dispatched_at.map(SystemTime::from),
                        elapsed: started.elapsed(),
                    };
                    let decided = crate::reconcile::decide_reconcile(
                        &r,
                        match (&lookup, &url, &result) {
                            (Some(l), Some(u), Some(res)) => Some((l.settings(), u.as_str(), res)),
                            _ => None,
                        },
                        row.delivery_arguments(),
                        window,
                        SystemTime::now(),
                        &mut || fastrand::f64(),
                    );
                    tracing::info!(outcome = decided.report.as_ref().map_or("", |r| r.outcome.as_str()), status = %decided.status, "reconciled");
                    let _ = done.send(decided).await;
                },
                span,
            ));
        }
        while lookups.join_next().await.is_some() {}
    }
    metrics.loop_ended("reconcile");
}

/// Registers (`on`) or deregisters this worker as waiting; returns whether it succeeded.
async fn register(pool: &PgPool, id: &str, on: bool) -> bool {
    let Ok(mut conn) = pool.acquire().await else {
        return false;
    };
    let r = if on {
        oncebox_store::register_waiting(&mut conn, id).await
    } else {
        oncebox_store::deregister_waiting(&mut conn, id).await
    };
    r.is_ok()
}

/// Sorts a claimed batch: rows that need no call are completed at once; rows for destinations
/// without key support are marked dispatched first (only marked rows are sent); the rest are
/// delivered.
#[allow(clippy::too_many_arguments)]
async fn start_batch(
    rows: Vec<ClaimedRow>,
    pool: &PgPool,
    routes: &Routes,
    settings: &Arc<WorkerSettings>,
    permits: &Arc<Semaphore>,
    done: &mpsc::Sender<Completion>,
    in_flight: &InFlight,
    metrics: &Arc<Metrics>,
    tasks: &mut JoinSet<()>,
) {
    let mut to_send = Vec::with_capacity(rows.len());
    let mut to_mark = Vec::new();
    for row in rows {
        let status: Status = row.status.parse().unwrap_or(Status::NeedsReview);
        let route = routes.get(&row.action);
        let skip = |status: Status, next: Next, outcome: &str, detail: String| Completion {
            intent_id: row.intent_id,
            phase: Phase::Deliver,
            epoch: row.epoch,
            attempt: row.attempt,
            status,
            response: None,
            external_reference: None,
            last_error: Some(json!({"code": outcome, "detail": detail})),
            next,
            report: Some(Report {
                outcome: outcome.into(),
                status_code: None,
                error_code: None,
                detail: Some(detail),
                elapsed: Duration::ZERO,
            }),
        };
        let completion = if status.is_terminal() {
            // Cancelled (or otherwise finished) while queued: never dispatched.
            Some(Completion {
                report: None,
                last_error: None,
                ..skip(status, Next::Done, "skipped", String::new())
            })
        } else if let Some(route) = route {
            let prior_unknown = row.dispatched_at.is_some();
            match (prior_unknown, route.mode, row.deadline_passed) {
                (true, IdempotencyMode::Lookup, _) => Some(skip(
                    Status::Unknown,
                    Next::Reconcile,
                    "previous_outcome_unknown",
                    "the worker that dispatched this attempt lost its lease before recording; to be looked up".into(),
                )),
                (true, IdempotencyMode::None, _) | (true, IdempotencyMode::Key, true) => Some(skip(
                    Status::NeedsReview,
                    Next::Done,
                    "previous_outcome_unknown",
                    "the worker that dispatched this attempt lost its lease before recording; no safe way to resolve it".into(),
                )),
                (false, _, true) => Some(skip(Status::Expired, Next::Done, "expired", "the deadline passed before an attempt could start".into())),
                _ => None,
            }
        } else {
            Some(skip(
                Status::Failed,
                Next::Done,
                "policy_rejected",
                format!("action {:?} is not configured", row.action),
            ))
        };
        match completion {
            Some(c) => {
                let _ = done.send(c).await;
            }
            None => {
                let honours = route.is_some_and(|r| r.mode.honours_keys());
                if !honours && row.dispatched_at.is_none() {
                    to_mark.push((row.intent_id, row.epoch));
                }
                to_send.push(row);
            }
        }
    }
    if !to_mark.is_empty() {
        let marked = match pool.acquire().await {
            Ok(mut conn) => oncebox_store::mark_dispatched(&mut conn, &settings.id, &to_mark).await,
            Err(e) => Err(e),
        };
        let marked: std::collections::HashSet<i64> = match marked {
            Ok(ids) => ids.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %e, "dispatch mark failed; those deliveries wait for their lease to expire");
                Default::default()
            }
        };
        let before = to_send.len();
        to_send.retain(|r| {
            !to_mark.iter().any(|(id, _)| *id == r.intent_id) || marked.contains(&r.intent_id)
        });
        metrics.leases_lost(before - to_send.len());
    }
    for row in to_send {
        let Some(route) = routes.get(&row.action).cloned() else {
            continue;
        };
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (done, in_flight_map, metrics, lease) = (
            done.clone(),
            in_flight.clone(),
            metrics.clone(),
            settings.lease,
        );
        let intent_id = row.intent_id;
        let epoch = row.epoch;
        // Hold the map while spawning: the task removes itself when done, which must come after
        // this insert.
        let span = tracing::info_span!(
            "delivery",
            tenant = %row.tenant_id,
            intent_id = row.intent_id,
            key = %row.idempotency_key,
            attempt = row.attempt + 1
        );
        let mut map = lock(in_flight);
        let handle = tasks.spawn(tracing::Instrument::instrument(
            async move {
                let _permit = permit;
                let _dest_permit = match &route.limit {
                    Some(l) => l.clone().acquire_owned().await.ok(),
                    None => None,
                };
                let attempt = row.attempt + 1;
                let req = DeliveryRequest {
                    tenant_id: &row.tenant_id,
                    idempotency_key: &row.idempotency_key,
                    action: &row.action,
                    attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
                    request_hash: &row.request_hash,
                    arguments: row.delivery_arguments(),
                };
                let started = Instant::now();
                let outcome: DeliveryOutcome = route.destination.deliver(&req, lease).await;
                let elapsed = started.elapsed();
                crash_point("after_call").await;
                metrics.delivered(
                    route.destination.name(),
                    outcome.class().as_str(),
                    elapsed.as_secs_f64(),
                );
                let attempted = Attempted {
                    intent_id: row.intent_id,
                    epoch: row.epoch,
                    attempt,
                    deadline: row.deadline.map(SystemTime::from),
                    elapsed,
                };
                let completion = decide(
                    &attempted,
                    &outcome,
                    &route.policy,
                    route.mode,
                    SystemTime::now(),
                    &mut || fastrand::f64(),
                );
                lock(&in_flight_map).remove(&row.intent_id);
                let _ = done.send(completion).await;
            },
            span,
        ));
        map.insert(intent_id, (epoch, handle));
    }
}

/// Test hook: `ONCEBOX_CRASH_AT=<point>` aborts the process at a named point — `after_claim`
/// (leased, nothing dispatched) or `after_call` (the destination answered, nothing recorded) —
/// so crash tests kill a worker exactly there instead of racing a signal.
/// Test hooks, never set in production: `ONCEBOX_CRASH_AT=POINT` aborts the process there;
/// `ONCEBOX_CRASH_AT=hang_POINT` wedges the task there for ever, as a call that never returns
/// would (what the liveness probe exists to catch).
async fn crash_point(point: &str) {
    let Ok(wanted) = std::env::var("ONCEBOX_CRASH_AT") else {
        return;
    };
    if wanted == point {
        tracing::error!(point, "ONCEBOX_CRASH_AT: aborting the process");
        std::process::abort();
    }
    if wanted.strip_prefix("hang_") == Some(point) {
        tracing::error!(point, "ONCEBOX_CRASH_AT: hanging here for ever");
        std::future::pending::<()>().await;
    }
}

/// Records completions in batches: waits for one, takes whatever else is ready, and writes them
/// in one fenced statement, up to three statements in flight at once (outcomes of different
/// intents commute), retrying transient failures while the leases last.
async fn complete(
    pool: PgPool,
    settings: Arc<WorkerSettings>,
    mut rx: mpsc::Receiver<Completion>,
    in_flight: InFlight,
) {
    let mut writes = JoinSet::new();
    while let Some(first) = rx.recv().await {
        let mut batch = Vec::with_capacity(settings.record_batch);
        batch.push(first);
        while batch.len() < settings.record_batch {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        while writes.len() >= 3 {
            writes.join_next().await;
        }
        let (pool, settings, in_flight) = (pool.clone(), settings.clone(), in_flight.clone());
        writes.spawn(async move {
            let write = || async {
                let mut conn = pool.acquire().await?;
                oncebox_store::record(&mut conn, &settings.id, &batch).await
            };
            let written = write
                .retry(ExponentialBuilder::default().with_min_delay(Duration::from_millis(50)).with_total_delay(Some(settings.lease)))
                .notify(|e, d| tracing::warn!(error = %e, retry_in = ?d, "recording outcomes failed"))
                .await;
            match written {
                Ok(ids) if ids.len() < batch.len() => {
                    tracing::warn!(lost = batch.len() - ids.len(), "outcomes not recorded: their leases were taken over");
                }
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, n = batch.len(), "gave up recording outcomes; their leases will expire and be taken over"),
            }
            let mut map = lock(&in_flight);
            for c in &batch {
                map.remove(&c.intent_id);
            }
        });
    }
    while writes.join_next().await.is_some() {}
}

/// Renews the leases of in-flight deliveries every third of the lease; aborts the calls whose
/// lease was taken over, so they write nothing.
async fn renew(
    pool: PgPool,
    settings: Arc<WorkerSettings>,
    in_flight: InFlight,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let period = settings.lease / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(period) => {}
        }
        let held: Vec<(i64, i64)> = lock(&in_flight)
            .iter()
            .map(|(id, (epoch, _))| (*id, *epoch))
            .collect();
        if held.is_empty() {
            continue;
        }
        let renewed = match pool.acquire().await {
            Ok(mut conn) => {
                oncebox_store::renew(
                    &mut conn,
                    &settings.id,
                    Phase::Deliver,
                    &held,
                    settings.lease,
                )
                .await
            }
            Err(e) => Err(e),
        };
        match renewed {
            Ok(ids) => {
                let kept: std::collections::HashSet<i64> = ids.into_iter().collect();
                let mut map = lock(&in_flight);
                // A delivery that finished (and was recorded) after the snapshot is gone from the
                // map: only rows still in flight and not renewed were taken over.
                let lost: Vec<i64> = held
                    .iter()
                    .filter(|(id, epoch)| {
                        !kept.contains(id) && map.get(id).is_some_and(|(e, _)| e == epoch)
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for id in &lost {
                    if let Some((_, handle)) = map.remove(id) {
                        handle.abort();
                    }
                }
                if !lost.is_empty() {
                    metrics.leases_lost(lost.len());
                    tracing::warn!(
                        lost = lost.len(),
                        "leases taken over: calls abandoned, nothing written"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
        }
    }
}

/// Refreshes the ready-queue gauges every few seconds (bounded count over the ready index).
async fn gauges(pool: PgPool, metrics: Arc<Metrics>, stop: CancellationToken) {
    loop {
        let row: Result<(i64, f64), sqlx::Error> = sqlx::query_as(
            "SELECT (SELECT count(*) FROM (SELECT 1 FROM oncebox.outbox
                      WHERE phase = 'deliver' AND lease_owner IS NULL AND available_at <= now() LIMIT 100000) r),
                    coalesce((SELECT extract(epoch FROM now() - min(available_at))::float8 FROM oncebox.outbox
                      WHERE phase = 'deliver' AND lease_owner IS NULL AND available_at <= now()), 0)",
        )
        .fetch_one(&pool)
        .await;
        if let Ok((depth, age)) = row {
            metrics.ready(depth.max(0) as u64, (age.max(0.0) * 1000.0) as u64);
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
}
