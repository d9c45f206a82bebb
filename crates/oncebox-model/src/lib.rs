//! oncebox's delivery protocol as an explicit-state model, checked exhaustively with
//! [stateright](https://docs.rs/stateright): intents and their outbox rows, workers that claim
//! (a lease with a new epoch), mark the row dispatched, send, record and crash at any step, run
//! slow until their lease expires, and a network that loses requests and answers, against
//! destinations that honour keys and destinations that do not.
//!
//! Where the real code decides, the model calls it: the journal's transition table
//! ([`Status::transition`]), what a claimed row needs ([`protocol::claimed_row`]), what follows an
//! unknown outcome ([`protocol::after_unknown`]) and the retry budget
//! ([`RetryPolicy::next_attempt`]). What the model adds is the store's fence (a write is applied
//! only for the lease's current epoch) and the world around it. [`Variant`]s break one mechanism
//! each, so the tests can show that the checker finds what the mechanism prevents.

use std::time::{Duration, SystemTime};

use oncebox_core::RetryPolicy;
use oncebox_core::config::IdempotencyMode;
use oncebox_core::protocol::{self, AfterUnknown, ClaimedRow};
use oncebox_core::retry::RetryDecision;
use oncebox_core::status::Status;
use stateright::{Model, Property};

/// Which version of the protocol is checked: the real one, or one with a mechanism removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The protocol as the code runs it.
    Correct,
    /// A record or a mark is applied whatever the lease's epoch: no fencing.
    NoFence,
    /// Rows for destinations that do not honour keys are sent without the dispatch mark.
    NoDispatchMark,
}

/// The model's bounds and its variant.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// Worker processes.
    pub workers: u8,
    /// One intent per entry, each to a destination of this idempotency mode.
    pub intents: Vec<IdempotencyMode>,
    /// Worker crashes allowed in a run.
    pub crashes: u8,
    /// Requests or answers the network may lose in a run.
    pub losses: u8,
    /// Leases that may expire in a run (their holder slow or dead).
    pub expiries: u8,
    /// Attempts each intent's retry policy allows.
    pub max_attempts: u32,
    /// Operator decisions (retry, resolve, cancel) in a run.
    pub decisions: u8,
    /// The protocol checked.
    pub variant: Variant,
}

/// An intent's outbox row: the lease (its epoch and holder) and the dispatch mark.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Row {
    /// The lease's epoch, one more at every claim; writes are fenced on it.
    pub epoch: u8,
    /// Whether a lease is held and unexpired.
    pub leased: bool,
    /// The worker the lease was last given to, until a record or an operator's retry releases
    /// it; writes are fenced on it with the epoch.
    pub owner: Option<usize>,
    /// An attempt was marked dispatched and not recorded.
    pub dispatched: bool,
    /// Attempts made.
    pub attempts: u32,
}

/// Where a worker is with the row it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Claimed; the row must be marked dispatched before the call.
    ToMark,
    /// Claimed (and marked, where needed); the call is next.
    ToSend,
    /// The request is out; an answer or a timeout is next.
    Calling,
    /// The answer came back: the effect happened.
    Answered,
    /// No answer in time: the outcome is unknown.
    TimedOut,
    /// The claim decided the row needs no call: record this status.
    Skip(Status),
}

/// What one worker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Job {
    /// The intent.
    pub intent: usize,
    /// The lease epoch its claim got.
    pub epoch: u8,
    /// How far it got.
    pub stage: Stage,
    /// The operator retries of the intent when it was claimed.
    pub retries: u8,
}

/// A message on the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Message {
    /// A request to the intent's destination, carrying the intent's key (the model's key of
    /// intent `i` is `i`).
    Request {
        /// The intent.
        intent: usize,
        /// The idempotency key it carries.
        key: usize,
        /// The worker waiting for its answer.
        worker: usize,
        /// That worker's lease epoch.
        epoch: u8,
        /// The operator retries of the intent when its attempt was claimed.
        retries: u8,
    },
    /// The destination's answer: the effect happened.
    Answer {
        /// The intent.
        intent: usize,
        /// The worker it goes back to.
        worker: usize,
        /// That worker's lease epoch.
        epoch: u8,
    },
}

/// The whole system: the journal, the outbox, the workers, the network, the destinations, and
/// what the properties need to remember.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// Each intent's journal status.
    pub journal: Vec<Status>,
    /// Each intent's outbox row, until it is completed.
    pub outbox: Vec<Option<Row>>,
    /// What each worker holds.
    pub workers: Vec<Option<Job>>,
    /// Messages in flight, sorted (a set).
    pub network: Vec<Message>,
    /// Requests each intent's destination received, of the attempts claimed since the intent's
    /// last operator retry (a person's retry may knowingly send again).
    pub requests: Vec<u8>,
    /// Operator retries of each intent.
    pub retries: Vec<u8>,
    /// Effects each intent's destination made (a key-honouring one makes one per key).
    pub effects: Vec<u8>,
    /// A request arrived carrying another intent's key.
    pub wrong_key: bool,
    /// A write was applied for a lease that was no longer the row's.
    pub stale_write: bool,
    /// A status changed in a way the transition table does not allow.
    pub illegal: bool,
    /// A terminal status changed.
    pub terminal_changed: bool,
    /// Crashes so far.
    pub crashes: u8,
    /// Messages lost so far.
    pub losses: u8,
    /// Leases expired so far.
    pub expiries: u8,
    /// Operator decisions so far.
    pub decisions: u8,
    /// Whether a request was ever sent for each intent (the journal's attempt count above 0).
    pub attempted: Vec<bool>,
    /// An operator moved an intent while automation owned it.
    pub operator_on_owned: bool,
    /// A destination executed a request for an intent already cancelled.
    pub effect_after_cancel: bool,
}

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Worker `w` claims intent `i`'s row (its lease is free).
    Claim(usize, usize),
    /// Worker `w` marks its row dispatched, fenced on its epoch.
    Mark(usize),
    /// Worker `w` sends its request.
    Send(usize),
    /// The destination executes a request.
    Execute(Message),
    /// An answer reaches its worker.
    Receive(Message),
    /// The network loses a message.
    Lose(Message),
    /// Worker `w` gives up waiting: the outcome is unknown.
    Timeout(usize),
    /// Worker `w` records what it learned, fenced on its epoch.
    Record(usize),
    /// Worker `w` crashes and forgets its job; its lease runs on until it expires.
    Crash(usize),
    /// Intent `i`'s lease expires (its holder was slow or dead).
    Expire(usize),
    /// An operator decides intent `i`: moves it to this status (`oncebox ops retry`, `resolve`,
    /// `cancel`), as the operator table allows.
    Decide(usize, Status),
}

impl Protocol {
    /// The bounds of the check the test command runs.
    pub fn small(variant: Variant) -> Protocol {
        Protocol {
            workers: 2,
            intents: vec![IdempotencyMode::Key, IdempotencyMode::None],
            crashes: 2,
            losses: 1,
            expiries: 2,
            max_attempts: 2,
            decisions: 0,
            variant,
        }
    }

    /// An operator deciding once (retry, resolve or cancel, whichever the tables allow at any
    /// moment), with one crash, one lost message and one lease expiry: operator decisions
    /// restart an intent's attempts, which multiplies the states.
    pub fn with_operator(variant: Variant) -> Protocol {
        Protocol {
            crashes: 1,
            losses: 1,
            expiries: 1,
            decisions: 1,
            ..Protocol::small(variant)
        }
    }

    /// Deeper bounds, for `scripts/model-check.sh --deep`: a third crash, a second lost message
    /// and a third lease expiry.
    pub fn deep(variant: Variant) -> Protocol {
        Protocol {
            crashes: 3,
            losses: 2,
            expiries: 3,
            ..Protocol::small(variant)
        }
    }

    /// The bounds `ONCEBOX_MODEL_BOUNDS` names: `deep`, or the small ones.
    pub fn from_env(variant: Variant) -> Protocol {
        match std::env::var("ONCEBOX_MODEL_BOUNDS").as_deref() {
            Ok("deep") => Protocol::deep(variant),
            _ => Protocol::small(variant),
        }
    }

    /// Whether intent `i` may still be attempted after `made` attempts: the retry policy decides.
    fn retry_left(&self, made: u32) -> bool {
        let policy = RetryPolicy {
            max_attempts: self.max_attempts,
            initial_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
        };
        let now = SystemTime::UNIX_EPOCH;
        matches!(
            policy.next_attempt(made, now, None, None, &mut || 0.0),
            RetryDecision::RetryAt(_)
        )
    }

    /// Whether a write by worker `w`'s `job` reaches its row: the store's fence on the epoch and
    /// the lease's holder, unless the variant drops it.
    fn fenced(&self, state: &mut State, w: usize, job: &Job) -> bool {
        let current = state.outbox[job.intent]
            .as_ref()
            .is_some_and(|row| (row.epoch, row.owner) == (job.epoch, Some(w)));
        if !current && self.variant == Variant::NoFence && state.outbox[job.intent].is_some() {
            state.stale_write = true;
            return true;
        }
        current
    }

    /// Moves intent `i` to `to` through the transition table (a record from `in_flight` as the
    /// worker may write it: [`protocol::record_allowed`]), remembering what it must not do.
    fn set_status(state: &mut State, i: usize, to: Status) {
        let from = state.journal[i];
        if from == to {
            return;
        }
        if from.is_terminal() {
            state.terminal_changed = true;
        }
        let allowed = from.transition(to).is_ok()
            || (from == Status::InFlight && protocol::record_allowed(to));
        if !allowed {
            state.illegal = true;
        }
        state.journal[i] = to;
    }

    /// The store's checks before a cancel (`oncebox_store::ops::cancel`): never attempted, not
    /// held by a worker, not marked dispatched.
    fn cancellable(state: &State, i: usize) -> bool {
        !state.attempted[i]
            && state.outbox[i]
                .as_ref()
                .is_some_and(|row| row.owner.is_none() && !row.dispatched)
    }

    /// An operator's decision: the operator table says which; the outbox row is removed (cancel,
    /// resolve) or queued afresh, unleased and undispatched, with a new retry budget (retry).
    fn decide(&self, state: &mut State, i: usize, to: Status) {
        let from = state.journal[i];
        state.decisions += 1;
        state.operator_on_owned |= matches!(
            from,
            Status::InFlight | Status::Unknown | Status::Reconciling
        );
        if from.operator_transition(to).is_err() {
            state.illegal = true;
        }
        let overrides = oncebox_core::status::OPERATOR_OVERRIDES.contains(&(from, to));
        if from.is_terminal() && !overrides {
            state.terminal_changed = true;
        }
        state.journal[i] = to;
        if to == Status::Pending {
            state.retries[i] += 1;
            state.requests[i] = 0;
        }
        state.outbox[i] = match to {
            Status::Pending => Some(Row {
                epoch: state.outbox[i].as_ref().map_or(0, |row| row.epoch),
                leased: false,
                owner: None,
                dispatched: false,
                attempts: 0,
            }),
            _ => None,
        };
    }

    /// Worker `w` marks its row dispatched, fenced; a worker whose lease was lost drops its job
    /// and sends nothing.
    fn mark(&self, state: &mut State, w: usize) {
        let Some(mut job) = state.workers[w] else {
            return;
        };
        if self.fenced(state, w, &job) {
            if let Some(row) = state.outbox[job.intent].as_mut() {
                row.dispatched = true;
            }
            job.stage = Stage::ToSend;
            state.workers[w] = Some(job);
        } else {
            state.workers[w] = None;
        }
    }

    fn claim(&self, state: &mut State, w: usize, i: usize) {
        let mode = self.intents[i];
        let Some(row) = state.outbox[i].as_mut() else {
            return;
        };
        row.epoch += 1;
        row.leased = true;
        row.owner = Some(w);
        let epoch = row.epoch;
        let stage = match protocol::claimed_row(row.dispatched, mode, false) {
            ClaimedRow::Send { mark } if mark && self.variant != Variant::NoDispatchMark => {
                Stage::ToMark
            }
            ClaimedRow::Send { .. } => Stage::ToSend,
            ClaimedRow::LookUp => Stage::Skip(Status::Unknown),
            ClaimedRow::NeedsReview => Stage::Skip(Status::NeedsReview),
            ClaimedRow::Expire => Stage::Skip(Status::Expired),
        };
        Self::set_status(state, i, Status::InFlight);
        state.workers[w] = Some(Job {
            intent: i,
            epoch,
            stage,
            retries: state.retries[i],
        });
    }

    /// The status and the row after `job`'s record, as the worker decides it.
    fn record(&self, state: &mut State, w: usize, job: Job) {
        state.workers[w] = None;
        if !self.fenced(state, w, &job) {
            return; // the lease was lost: nothing is written
        }
        let i = job.intent;
        let Some(row) = state.outbox[i].as_mut() else {
            return;
        };
        let (status, done) = match job.stage {
            Stage::Answered => (Status::Succeeded, true),
            Stage::TimedOut => {
                row.attempts += 1;
                let left = self.retry_left(row.attempts);
                match protocol::after_unknown(self.intents[i], left) {
                    AfterUnknown::Resend => (Status::Unknown, false),
                    AfterUnknown::LookUp => (Status::Unknown, false),
                    AfterUnknown::NeedsReview => (Status::NeedsReview, true),
                }
            }
            Stage::Skip(status) => (status, !matches!(status, Status::Unknown)),
            Stage::ToMark | Stage::ToSend | Stage::Calling => return,
        };
        row.leased = false;
        row.owner = None;
        row.dispatched = false;
        if done {
            state.outbox[i] = None;
        }
        Self::set_status(state, i, status);
    }

    fn execute(state: &mut State, mode: IdempotencyMode, message: Message) {
        if let Message::Request {
            intent,
            key,
            worker,
            epoch,
            retries,
        } = message
        {
            if retries == state.retries[intent] {
                state.requests[intent] = state.requests[intent].saturating_add(1);
            }
            state.effect_after_cancel |= state.journal[intent] == Status::Cancelled;
            state.wrong_key |= key != intent;
            if !(mode.honours_keys() && state.effects[intent] > 0) {
                state.effects[intent] = state.effects[intent].saturating_add(1);
            }
            insert(
                &mut state.network,
                Message::Answer {
                    intent,
                    worker,
                    epoch,
                },
            );
        }
    }
}

/// Adds `m` to the sorted set `network`.
fn insert(network: &mut Vec<Message>, m: Message) {
    if let Err(at) = network.binary_search(&m) {
        network.insert(at, m);
    }
}

/// Removes `m` from the sorted set `network`.
fn remove(network: &mut Vec<Message>, m: &Message) {
    if let Ok(at) = network.binary_search(m) {
        network.remove(at);
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let n = self.intents.len();
        vec![State {
            journal: vec![Status::Pending; n],
            outbox: vec![
                Some(Row {
                    epoch: 0,
                    leased: false,
                    owner: None,
                    dispatched: false,
                    attempts: 0,
                });
                n
            ],
            workers: vec![None; usize::from(self.workers)],
            network: Vec::new(),
            requests: vec![0; n],
            retries: vec![0; n],
            effects: vec![0; n],
            wrong_key: false,
            stale_write: false,
            illegal: false,
            terminal_changed: false,
            crashes: 0,
            losses: 0,
            expiries: 0,
            decisions: 0,
            attempted: vec![false; n],
            operator_on_owned: false,
            effect_after_cancel: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (w, job) in state.workers.iter().enumerate() {
            match job {
                None => {
                    for (i, row) in state.outbox.iter().enumerate() {
                        if row.as_ref().is_some_and(|r| !r.leased) {
                            actions.push(Action::Claim(w, i));
                        }
                    }
                }
                Some(job) => {
                    actions.push(match job.stage {
                        Stage::ToMark => Action::Mark(w),
                        Stage::ToSend => Action::Send(w),
                        Stage::Calling => Action::Timeout(w),
                        Stage::Answered | Stage::TimedOut | Stage::Skip(_) => Action::Record(w),
                    });
                    if state.crashes < self.crashes {
                        actions.push(Action::Crash(w));
                    }
                }
            }
        }
        for m in &state.network {
            actions.push(match m {
                Message::Request { .. } => Action::Execute(*m),
                Message::Answer { .. } => Action::Receive(*m),
            });
            if state.losses < self.losses {
                actions.push(Action::Lose(*m));
            }
        }
        if state.decisions < self.decisions {
            for (i, status) in state.journal.iter().enumerate() {
                for to in status.operator_next() {
                    if *to != Status::Cancelled || Self::cancellable(state, i) {
                        actions.push(Action::Decide(i, *to));
                    }
                }
            }
        }
        for (i, row) in state.outbox.iter().enumerate() {
            if row.as_ref().is_some_and(|r| r.leased) && state.expiries < self.expiries {
                actions.push(Action::Expire(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Claim(w, i) => self.claim(&mut state, w, i),
            Action::Mark(w) => self.mark(&mut state, w),
            Action::Send(w) => {
                let mut job = state.workers[w]?;
                let request = Message::Request {
                    intent: job.intent,
                    key: job.intent,
                    worker: w,
                    epoch: job.epoch,
                    retries: job.retries,
                };
                insert(&mut state.network, request);
                state.attempted[job.intent] = true;
                job.stage = Stage::Calling;
                state.workers[w] = Some(job);
            }
            Action::Execute(m) => {
                remove(&mut state.network, &m);
                let Message::Request { intent, .. } = m else {
                    return None;
                };
                Self::execute(&mut state, self.intents[intent], m);
            }
            Action::Receive(m) => {
                remove(&mut state.network, &m);
                if let Message::Answer {
                    intent,
                    worker,
                    epoch,
                } = m
                    && let Some(job) = state.workers[worker]
                    && (job.intent, job.epoch, job.stage) == (intent, epoch, Stage::Calling)
                {
                    state.workers[worker] = Some(Job {
                        stage: Stage::Answered,
                        ..job
                    });
                }
            }
            Action::Lose(m) => {
                remove(&mut state.network, &m);
                state.losses += 1;
            }
            Action::Timeout(w) => {
                let job = state.workers[w]?;
                state.workers[w] = Some(Job {
                    stage: Stage::TimedOut,
                    ..job
                });
            }
            Action::Record(w) => {
                let job = state.workers[w]?;
                self.record(&mut state, w, job);
            }
            Action::Crash(w) => {
                state.workers[w] = None;
                state.crashes += 1;
            }
            Action::Decide(i, to) => self.decide(&mut state, i, to),
            Action::Expire(i) => {
                if let Some(row) = state.outbox[i].as_mut() {
                    row.leased = false;
                }
                state.expiries += 1;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("fencing: a stale lease never writes", |_, s: &State| {
                !s.stale_write
            }),
            Property::always(
                "a terminal status changes only by the operator override the table lists",
                |_, s: &State| !s.terminal_changed,
            ),
            Property::always("every status change is in the table", |_, s: &State| {
                !s.illegal
            }),
            Property::always(
                "an operator never moves an intent automation owns",
                |_, s: &State| !s.operator_on_owned,
            ),
            Property::always(
                "a cancelled intent has no effect after its cancel",
                |_, s: &State| !s.effect_after_cancel,
            ),
            Property::always(
                "every request carries its intent's one key",
                |_, s: &State| !s.wrong_key,
            ),
            Property::always(
                "a destination that honours keys makes at most one effect",
                |m: &Protocol, s: &State| {
                    m.intents
                        .iter()
                        .zip(&s.effects)
                        .all(|(mode, effects)| !mode.honours_keys() || *effects <= 1)
                },
            ),
            Property::always(
                "a destination that does not is never sent a second request, unless a person retries",
                |m: &Protocol, s: &State| {
                    m.intents
                        .iter()
                        .zip(&s.requests)
                        .all(|(mode, requests)| mode.honours_keys() || *requests <= 1)
                },
            ),
        ]
    }
}
