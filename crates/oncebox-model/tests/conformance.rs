//! The model held against the real store: seeded random walks through the model's actions, each
//! step run against Postgres through `oncebox-store` (claim, mark, renew, release, record, lease
//! expiry, deadline, operator decisions, people's approvals and rejections, approval windows
//! closing — with the workers and leases the model chose), the
//! journal and outbox compared with the model's state after every step, and every cancel the
//! operator table would allow tried (and rolled back): the store must refuse where the model
//! does. A divergence names the seed and the step;
//! `ONCEBOX_CONFORMANCE_SEED=n` replays one walk.

use std::collections::HashMap;
use std::time::Duration;

use oncebox_core::config::IdempotencyMode;
use oncebox_core::{AttemptKind, IntentNames, NewIntent, Status};
use oncebox_model::{Action, IntentSpec, Phase, Protocol, RowNext, State, Variant};
use oncebox_store::approvals;
use oncebox_store::ops::{self, Actor, OpsError, Resolution};
use oncebox_store::{Completion, Intake, Lease, Next, Report};
use serde_json::json;
use sqlx::PgPool;
use stateright::Model;

/// Walks and the most steps per walk in the test command (a walk ends early when the system
/// has nothing left to do, after about 50 steps): a few thousand steps in all.
const WALKS: u64 = 100;
const STEPS: usize = 200;

/// A small deterministic generator (xorshift64*), so a seed replays its walk.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

/// The walked model: two intents in one lane to a destination that honours keys (the first with
/// a deadline, the second held for one approval), two in a lane to a destination that does
/// neither, one alone to a lookup destination, one alone to a destination that does neither and
/// one alone held for two approvals; looser bounds than the exhaustive check, since a walk
/// visits few states.
fn protocol() -> Protocol {
    Protocol {
        workers: 2,
        intents: vec![
            IntentSpec::in_lane(IdempotencyMode::Key, 0).with_deadline(),
            IntentSpec::in_lane(IdempotencyMode::Key, 0).needing(1),
            IntentSpec::in_lane(IdempotencyMode::None, 1),
            IntentSpec::in_lane(IdempotencyMode::None, 1),
            IntentSpec::alone(IdempotencyMode::Lookup),
            IntentSpec::alone(IdempotencyMode::None),
            IntentSpec::alone(IdempotencyMode::Key).needing(2),
        ],
        crashes: 3,
        losses: 3,
        expiries: 3,
        max_attempts: 2,
        early_looks: 3,
        decisions: 3,
        variant: Variant::Correct,
    }
}

/// The action an intent of `spec` is submitted as: one per destination (a lane is a tenant,
/// destination and ordering key), and one more per approval policy.
fn action_of(spec: &IntentSpec) -> &'static str {
    match (spec.lane, spec.mode, spec.approvals) {
        (Some(0), _, 0) => "lane0",
        (Some(0), _, _) => "lane0_held",
        (Some(_), _, _) => "lane1",
        (None, IdempotencyMode::Lookup, _) => "lookup",
        (None, _, 0) => "plain",
        (None, _, _) => "held",
    }
}

/// The walk's actions: each to the destination of its name (`lane0_held` to `lane0`, `held` to
/// `plain`), the held ones with the approval policies of the walked intents.
const CONFIG: &str = r#"
[actions.lane0]
destination = "lane0"
[actions.lane0_held]
destination = "lane0"
approval = { approvals = 1 }
[actions.lane1]
destination = "lane1"
[actions.lookup]
destination = "lookup"
[actions.plain]
destination = "plain"
[actions.held]
destination = "plain"
approval = { approvals = 2 }

[destinations.lane0]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "key"
[destinations.lane1]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "none"
[destinations.lookup]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "key"
[destinations.plain]
kind = "http"
url = "http://127.0.0.1:9/"
idempotency = "none"
"#;

/// Person `p` of the model, as the store names an actor (person 0 submitted every intent).
fn person(p: u8) -> Actor {
    Actor::new(format!("person {p}"), "ops", "test")
}

fn worker(w: usize) -> String {
    format!("w{w}")
}

fn store_phase(p: Phase) -> oncebox_store::Phase {
    match p {
        Phase::Deliver => oncebox_store::Phase::Deliver,
        Phase::Reconcile => oncebox_store::Phase::Reconcile,
    }
}

/// An intent's journal status and its delivery or reconciliation row, as the store has them.
#[derive(sqlx::FromRow)]
struct Found {
    status: Status,
    phase: Option<oncebox_store::Phase>,
    epoch: Option<i64>,
    lease_owner: Option<String>,
    leased: bool,
    dispatched: bool,
    parked: bool,
    attempts: Option<i32>,
}

/// One walk: the store and the model side by side.
struct Walk<'a> {
    pool: &'a PgPool,
    model: Protocol,
    state: State,
    /// The store's id of each model intent.
    ids: Vec<i64>,
    /// The lease each model worker holds in the store.
    leases: HashMap<usize, Lease>,
    /// The store's epoch of each intent's row when the walk began.
    base_epochs: Vec<i64>,
    seed: u64,
    step: usize,
}

impl Walk<'_> {
    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {} step {}: {what}\n  model: journal {:?}\n         outbox {:?}\n         workers {:?}\n  replay: ONCEBOX_CONFORMANCE_SEED={}",
            self.seed,
            self.step,
            self.state.journal,
            self.state.outbox,
            self.state.workers,
            self.seed
        )
    }

    async fn sql(&self, statement: &'static str, id: i64) {
        sqlx::query(statement)
            .bind(id)
            .execute(self.pool)
            .await
            .expect(statement);
    }

    /// Requires the store to have written `done` (the rows a fenced statement of worker `w`
    /// returned) exactly where the model lets `w` keep its job after `action`; a worker that
    /// loses it loses its lease too.
    fn same_fence(&mut self, action: Action, w: usize, done: &[i64], dropped: &str) {
        let after = self.model.next_state(&self.state, action).expect("a step");
        let kept = after.workers[w].is_some();
        if done.is_empty() == kept {
            self.fail(&format!(
                "{action:?}: the store wrote {done:?}, the model {}",
                if kept { "did" } else { dropped }
            ));
        }
        if !kept {
            self.leases.remove(&w);
        }
    }

    /// Runs `action` against the store; returns the action the model takes (a claim may take
    /// another row than the one the walk drew: the store decides which, the model must allow it).
    async fn apply(&mut self, action: Action) -> Action {
        match action {
            Action::Claim(w, i) => {
                let phase = self.state.outbox[i].as_ref().expect("claimable row").phase;
                let mut conn = self.pool.acquire().await.expect("connection");
                let rows = oncebox_store::claim(
                    &mut *conn,
                    store_phase(phase),
                    &worker(w),
                    1,
                    Duration::from_secs(3600),
                    &mut oncebox_store::TenantCursor::default(),
                )
                .await
                .expect("claim");
                let Some(row) = rows.first() else {
                    self.fail(&format!(
                        "the store claimed nothing where the model claims {action:?}"
                    ));
                };
                let Some(j) = self.ids.iter().position(|id| *id == row.lease.intent_id) else {
                    self.fail("the store claimed a row of no intent of the walk");
                };
                let taken = Action::Claim(w, j);
                let mut allowed = Vec::new();
                self.model.actions(&self.state, &mut allowed);
                if !allowed.contains(&taken) {
                    self.fail(&format!(
                        "the store claimed intent {j}, which the model does not allow ({allowed:?})"
                    ));
                }
                let model_row = self.state.outbox[j].as_ref().expect("claimable row");
                if row.dispatched_at.is_some() != model_row.dispatched
                    || row.deadline_passed != self.state.deadline_passed[j]
                {
                    self.fail(&format!(
                        "claimed intent {j}: the store's dispatched_at {:?} and deadline_passed {} against the model's row {model_row:?}",
                        row.dispatched_at, row.deadline_passed
                    ));
                }
                if phase == Phase::Reconcile {
                    let marked =
                        oncebox_store::mark_reconciling(&mut *conn, &worker(w), &[row.lease])
                            .await
                            .expect("mark reconciling");
                    if marked.len() != 1 {
                        self.fail("a fresh reconcile lease was not marked reconciling");
                    }
                }
                self.leases.insert(w, row.lease);
                taken
            }
            Action::Mark(w) => {
                let lease = self.leases[&w];
                let marked = oncebox_store::mark_dispatched(self.pool, &worker(w), &[lease])
                    .await
                    .expect("mark");
                self.same_fence(action, w, &marked, "fenced it out");
                action
            }
            Action::Record(w) => {
                let lease = self.leases.remove(&w).expect("a lease");
                let decision = self.model.decision(&self.state, w);
                let written = match decision {
                    Some(d) => {
                        let completion = Completion {
                            lease,
                            phase: store_phase(d.phase),
                            attempt: i32::try_from(d.attempts).expect("few attempts"),
                            status: d.status,
                            response: None,
                            external_reference: None,
                            last_error: None,
                            next: match d.next {
                                RowNext::Done => Next::Done,
                                RowNext::Retry => Next::Retry(Duration::ZERO),
                                RowNext::Reconcile => Next::Reconcile,
                                RowNext::Reissue => Next::Reissue,
                            },
                            report: Some(Report {
                                kind: AttemptKind::Succeeded,
                                status_code: None,
                                error_code: None,
                                detail: Some(format!("conformance step {}", self.step)),
                                elapsed: Duration::ZERO,
                            }),
                        };
                        oncebox_store::record(self.pool, &worker(w), &[completion])
                            .await
                            .expect("record")
                    }
                    None => Vec::new(),
                };
                let fenced = self.state.workers[w].is_some_and(|job| {
                    self.state.outbox[job.intent]
                        .as_ref()
                        .is_some_and(|row| (row.epoch, row.owner) == (job.epoch, Some(w)))
                });
                if written.is_empty() == (decision.is_some() && fenced) {
                    self.fail(&format!(
                        "record by {w}: the store wrote {written:?}, the model {}",
                        if fenced { "writes" } else { "fences it out" }
                    ));
                }
                action
            }
            Action::Crash(w) => {
                self.leases.remove(&w);
                action
            }
            Action::Renew(w) => {
                let lease = self.leases[&w];
                let renewed = oncebox_store::renew(
                    self.pool,
                    &worker(w),
                    oncebox_store::Phase::Deliver,
                    &[lease],
                    Duration::from_secs(3600),
                )
                .await
                .expect("renew");
                self.same_fence(action, w, &renewed, "abandoned the call");
                action
            }
            Action::Release(w) => {
                let lease = self.leases.remove(&w).expect("a lease");
                let released = oncebox_store::release(
                    self.pool,
                    &worker(w),
                    oncebox_store::Phase::Deliver,
                    &[lease],
                )
                .await
                .expect("release");
                if released.len() != 1 {
                    self.fail(&format!(
                        "release by {w}: the store released {released:?}, the model its lease"
                    ));
                }
                action
            }
            Action::Expire(i) => {
                self.sql(
                    "UPDATE oncebox.outbox SET lease_expires_at = now() - interval '1 hour' \
                     WHERE intent_id = $1 AND phase IN ('deliver', 'reconcile')",
                    self.ids[i],
                )
                .await;
                action
            }
            Action::DeadlinePasses(i) => {
                self.sql(
                    "UPDATE oncebox.intents SET deadline = now() - interval '1 hour' WHERE id = $1",
                    self.ids[i],
                )
                .await;
                action
            }
            Action::Decide(i, to) => {
                let id = self.ids[i];
                let actor = Actor::new("conformance", "ops", "test");
                let mut tx = self.pool.begin().await.expect("begin");
                let done = match to {
                    Status::Pending => ops::retry(&mut tx, id, &actor, "walk").await,
                    Status::Succeeded => {
                        ops::resolve(
                            &mut tx,
                            id,
                            &Resolution::Succeeded { reference: None },
                            &actor,
                            Some("walk"),
                        )
                        .await
                    }
                    Status::Failed => {
                        ops::resolve(
                            &mut tx,
                            id,
                            &Resolution::Failed {
                                reason: "walk".into(),
                            },
                            &actor,
                            Some("walk"),
                        )
                        .await
                    }
                    Status::Cancelled => ops::cancel(&mut tx, id, &actor, Some("walk")).await,
                    other => self.fail(&format!("the operator table offered {other:?}")),
                };
                if let Err(e) = done {
                    self.fail(&format!("the store refused the operator's {action:?}: {e}"));
                }
                tx.commit().await.expect("commit");
                action
            }
            Action::Approve(i, p) => {
                let mut tx = self.pool.begin().await.expect("begin");
                let store =
                    approvals::approve(&mut tx, self.ids[i], &person(p), Some("walk")).await;
                let model = self.model.next_state(&self.state, action).expect("a step");
                // The model refuses the submitter and a second approval by one person: nothing
                // of theirs is recorded.
                let refused = model.approved[i] == self.state.approved[i];
                match (&store, refused) {
                    (Ok(_), false) | (Err(OpsError::Refused(_)), true) => {}
                    (store, _) => self.fail(&format!(
                        "{action:?}: the store {store:?}, the model {}",
                        if refused { "refuses" } else { "records it" }
                    )),
                }
                tx.commit().await.expect("commit");
                action
            }
            Action::Reject(i) => {
                let mut tx = self.pool.begin().await.expect("begin");
                if let Err(e) = approvals::reject(&mut tx, self.ids[i], &person(1), "walk").await {
                    self.fail(&format!("the store refused {action:?}: {e}"));
                }
                tx.commit().await.expect("commit");
                action
            }
            Action::ApprovalCloses(i) => {
                // The window's end is when its row was queued for, unless it is parked behind
                // its lane's head.
                self.sql(
                    "WITH closed AS (UPDATE oncebox.intents \
                       SET approval_expires_at = now() - interval '1 hour' WHERE id = $1) \
                     UPDATE oncebox.outbox SET available_at = now() - interval '1 hour' \
                     WHERE intent_id = $1 AND phase = 'deliver' AND available_at <> 'infinity'",
                    self.ids[i],
                )
                .await;
                action
            }
            // The network, the destinations, time windows and lookups are the model's alone.
            Action::Send(_)
            | Action::Execute(_)
            | Action::Receive(_)
            | Action::Lose(_)
            | Action::Timeout(_)
            | Action::LookUp(..)
            | Action::WindowPasses(_) => action,
        }
    }

    /// Asks the store to cancel every intent the operator table would let a person cancel, in a
    /// transaction rolled back: the store must refuse exactly where the model does.
    async fn compare_cancels(&self) {
        for (i, id) in self.ids.iter().enumerate() {
            if self.state.journal[i]
                .operator_transition(Status::Cancelled)
                .is_err()
            {
                continue;
            }
            let mut tx = self.pool.begin().await.expect("begin");
            let actor = Actor::new("conformance", "ops", "test");
            let store = ops::cancel(&mut tx, *id, &actor, Some("probe")).await;
            tx.rollback().await.expect("rollback");
            if store.is_ok() != Protocol::cancellable(&self.state, i) {
                self.fail(&format!(
                    "cancel of intent {i}: the store {}, the model {}",
                    match &store {
                        Ok(_) => "cancels it".to_owned(),
                        Err(e) => format!("refuses ({e})"),
                    },
                    if Protocol::cancellable(&self.state, i) {
                        "cancels it"
                    } else {
                        "refuses"
                    }
                ));
            }
        }
    }

    /// Compares every intent's journal row and outbox row with the model's.
    async fn compare(&self) {
        for (i, id) in self.ids.iter().enumerate() {
            let found: Found = sqlx::query_as(
                "SELECT i.status, o.phase, o.epoch, o.lease_owner, \
                        coalesce(o.lease_expires_at > now(), false) AS leased, \
                        o.dispatched_at IS NOT NULL AS dispatched, \
                        coalesce(o.available_at = 'infinity', false) AS parked, \
                        o.attempt - o.budget_from AS attempts \
                 FROM oncebox.intents i LEFT JOIN oncebox.outbox o \
                   ON o.intent_id = i.id AND o.phase IN ('deliver', 'reconcile') \
                 WHERE i.id = $1",
            )
            .bind(id)
            .fetch_one(self.pool)
            .await
            .expect("intent");
            let status = found.status;
            let row = found.phase.map(|phase| {
                (
                    phase,
                    found.epoch.unwrap_or_default(),
                    found.lease_owner.clone(),
                    found.leased,
                    found.dispatched,
                    found.parked,
                    found.attempts.unwrap_or_default(),
                )
            });
            if status != self.state.journal[i] {
                self.fail(&format!(
                    "intent {i}: the store's status is {status:?}, the model's {:?}",
                    self.state.journal[i]
                ));
            }
            match (&row, &self.state.outbox[i]) {
                (None, None) => {}
                (Some((phase, epoch, owner, leased, dispatched, parked, attempts)), Some(m)) => {
                    let model_owner = m.owner.map(worker);
                    let same = *phase == store_phase(m.phase)
                        && *epoch - self.base_epochs[i] == i64::from(m.epoch)
                        && *owner == model_owner
                        && (owner.is_none() || *leased == m.leased)
                        && *dispatched == m.dispatched
                        && i64::from(*attempts) == i64::from(m.attempts);
                    if !same {
                        self.fail(&format!(
                            "intent {i}: the store's row (phase {phase:?}, epoch {epoch} from {}, owner {owner:?}, leased {leased}, dispatched {dispatched}, attempts {attempts} since the last retry) against the model's {m:?}",
                            self.base_epochs[i]
                        ));
                    }
                    // A lane's follower waits parked until its lane opens (a claimed row keeps
                    // the time it was claimed at).
                    if m.phase == Phase::Deliver
                        && owner.is_none()
                        && *parked == self.model.lane_open(&self.state, i)
                    {
                        self.fail(&format!(
                            "intent {i}: parked {parked} in the store, lane open {} in the model",
                            self.model.lane_open(&self.state, i)
                        ));
                    }
                }
                (store, model) => self.fail(&format!(
                    "intent {i}: the store's outbox row {store:?}, the model's {model:?}"
                )),
            }
        }
    }
}

async fn walk(pool: &PgPool, seed: u64) -> usize {
    sqlx::query(
        "TRUNCATE oncebox.intents, oncebox.outbox, oncebox.lanes, oncebox.attempts, \
         oncebox.audit, oncebox.held_arguments RESTART IDENTITY CASCADE",
    )
    .execute(pool)
    .await
    .expect("truncate");
    let model = protocol();
    let config = oncebox_core::config::Config::from_toml(CONFIG).expect("the walk's config");
    let intake = Intake::new(&config, None).expect("no rule hashes");
    let mut ids = Vec::new();
    for (i, spec) in model.intents.iter().enumerate() {
        let mut conn = pool.acquire().await.expect("connection");
        let intent = NewIntent {
            ordering_key: spec.lane.map(|l| format!("lane-{l}")),
            deadline: spec
                .deadline
                .then(|| std::time::SystemTime::now() + Duration::from_secs(86_400)),
            ..NewIntent::new(
                IntentNames {
                    tenant_id: "t",
                    idempotency_key: &format!("k{i}"),
                    action: action_of(spec),
                },
                json!({"i": i}),
            )
        };
        let submitter = person(0).who;
        let submitted = intake
            .submit_alone_as(&mut conn, intent, &submitter)
            .await
            .expect("submit");
        ids.push(submitted.intent.id);
    }
    let mut base_epochs = Vec::new();
    for id in &ids {
        let epoch: i64 = sqlx::query_scalar(
            "SELECT epoch FROM oncebox.outbox WHERE intent_id = $1 AND phase = 'deliver'",
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .expect("epoch");
        base_epochs.push(epoch);
    }
    let state = model.init_states().remove(0);
    let mut walk = Walk {
        pool,
        model,
        state,
        ids,
        leases: HashMap::new(),
        base_epochs,
        seed,
        step: 0,
    };
    walk.compare().await;
    let mut rng = Rng::new(seed);
    for step in 1..=STEPS {
        walk.step = step;
        let mut actions = Vec::new();
        walk.model.actions(&walk.state, &mut actions);
        if actions.is_empty() {
            return step - 1;
        }
        let drawn = actions[rng.below(actions.len())];
        let taken = walk.apply(drawn).await;
        walk.state = walk
            .model
            .next_state(&walk.state, taken)
            .unwrap_or_else(|| walk.fail(&format!("the model cannot take {taken:?}")));
        walk.compare().await;
        walk.compare_cancels().await;
    }
    STEPS
}

#[sqlx::test(migrations = "../../migrations")]
async fn the_store_does_what_the_model_does_step_by_step(pool: PgPool) {
    let seeds: Vec<u64> = match std::env::var("ONCEBOX_CONFORMANCE_SEED") {
        Ok(s) => vec![s.parse().expect("ONCEBOX_CONFORMANCE_SEED is a number")],
        Err(_) => (1..=WALKS).collect(),
    };
    let mut steps = 0;
    for seed in seeds {
        steps += walk(&pool, seed).await;
    }
    eprintln!("{steps} steps held against the store");
    assert!(
        steps >= 2000 || std::env::var("ONCEBOX_CONFORMANCE_SEED").is_ok(),
        "{steps} steps"
    );
}
