//! oncebox's delivery protocol as an explicit-state model, checked exhaustively with
//! [stateright](https://docs.rs/stateright): intents (some in one ordering lane, some with a
//! deadline) and their outbox rows; workers that claim (a lease with a new epoch), mark the row
//! dispatched, send, renew their lease, record, look effects up, stop (giving the lease back) and
//! crash at any step, or run slow until their lease expires; a network that loses requests and answers; destinations that honour keys, that can be
//! looked up after a consistency window, and that do neither; operators who retry, resolve
//! and cancel; and people who approve or reject an intent its action's approval policy holds,
//! racing the workers and the end of its approval window.
//!
//! Where the real code decides, the model calls it: the journal's transition and operator tables
//! ([`Status::transition`], [`Status::operator_transition`]), what a claimed row needs
//! ([`protocol::claimed_row`]), what follows an unknown outcome ([`protocol::after_unknown`]),
//! what a lookup's result means ([`protocol::after_lookup`]), which status releases an ordering
//! lane ([`protocol::releases_lane`]) and the retry budget ([`RetryPolicy::next_attempt`]). What
//! the model adds is the store's fence (a write is applied only for the lease's current epoch and
//! holder), the lanes' parking and the world around them. [`Variant`]s break one mechanism each,
//! so the tests can show that the checker finds what the mechanism prevents.
//!
//! Time is not modelled as a clock: a lease expiring, a deadline passing and a consistency window
//! passing are steps of their own, which the checker may take at any moment they are allowed.

use std::time::{Duration, SystemTime};

use oncebox_core::RetryPolicy;
use oncebox_core::config::IdempotencyMode;
use oncebox_core::protocol::{self, AfterLookup, AfterUnknown, ClaimedRow, LookupSeen};
use oncebox_core::retry::RetryDecision;
use oncebox_core::status::Status;
use stateright::{Model, Property, Representative};

/// The property that two tenants' intents under one key are two effects: no intent is
/// recorded succeeded on an effect its destination made for another.
pub const TWO_INTENTS_TWO_EFFECTS: &str = "two intents, two effects: no intent succeeds on an effect made for another, even under another tenant's same key";

/// Which version of the protocol is checked: the real one, or one with a mechanism removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The protocol as the code runs it.
    Correct,
    /// A record or a mark is applied whatever the lease's epoch: no fencing.
    NoFence,
    /// Rows for destinations that do not honour keys are sent without the dispatch mark.
    NoDispatchMark,
    /// An unknown outcome at a lookup destination is re-sent (as if it honoured keys) instead of
    /// being looked up.
    ResendWithoutLookup,
    /// The intent after an ordering lane's head may be claimed while the head is unreleased.
    SecondLaneHead,
    /// A lookup that finds nothing always looks again, even past the consistency window: an
    /// intent whose request was lost is never re-issued.
    NeverReissue,
    /// An intent awaiting approval is released one approval short of what its policy asks.
    OneApproverShort,
    /// Requests carry the bare idempotency key, without the tenant: two tenants' intents
    /// under one key look like one intent to the destination.
    BareKey,
}

/// The idempotency key an intent is submitted under, within its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyName {
    /// A key no other intent of the model has (intent `i`'s own).
    Own(usize),
    /// Key number `n`, which intents of other tenants may use too.
    Named(u8),
}

/// What a request carries as its intent's identity: the delivery key, its tenant and key
/// (the tenant left out by [`Variant::BareKey`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SentKey {
    /// The intent's tenant, when the key carries it.
    pub tenant: Option<u8>,
    /// The intent's key within its tenant.
    pub key: KeyName,
}

/// One intent of the model: its destination's idempotency mode, its ordering lane and whether
/// it has a deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntentSpec {
    /// How its destination handles a repeated request.
    pub mode: IdempotencyMode,
    /// The ordering lane it was submitted to; intents of one lane are in submit order.
    pub lane: Option<u8>,
    /// Whether it has a deadline (which may pass at any moment before it is settled).
    pub deadline: bool,
    /// How many distinct people its action's approval policy asks to approve it (0: none).
    pub approvals: u8,
    /// Its tenant.
    pub tenant: u8,
    /// Its key within the tenant, when it is one other tenants use too (else its own).
    pub key: Option<u8>,
}

impl IntentSpec {
    /// An intent outside any lane, without a deadline.
    pub const fn alone(mode: IdempotencyMode) -> IntentSpec {
        IntentSpec {
            mode,
            lane: None,
            deadline: false,
            approvals: 0,
            tenant: 0,
            key: None,
        }
    }

    /// An intent of lane `lane`, without a deadline.
    pub const fn in_lane(mode: IdempotencyMode, lane: u8) -> IntentSpec {
        IntentSpec {
            mode,
            lane: Some(lane),
            deadline: false,
            approvals: 0,
            tenant: 0,
            key: None,
        }
    }

    /// The same intent with a deadline.
    pub const fn with_deadline(self) -> IntentSpec {
        IntentSpec {
            deadline: true,
            ..self
        }
    }

    /// The same intent, held for `approvals` distinct people to approve it.
    pub const fn needing(self, approvals: u8) -> IntentSpec {
        IntentSpec { approvals, ..self }
    }

    /// The same intent, submitted by `tenant` under key number `key` (which other tenants'
    /// intents may use too).
    pub const fn keyed(self, tenant: u8, key: u8) -> IntentSpec {
        IntentSpec {
            tenant,
            key: Some(key),
            ..self
        }
    }
}

/// The model's bounds and its variant.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// Worker processes.
    pub workers: u8,
    /// The intents, in submit order.
    pub intents: Vec<IntentSpec>,
    /// Worker crashes allowed in a run.
    pub crashes: u8,
    /// Requests or answers the network may lose in a run.
    pub losses: u8,
    /// Leases that may expire while their holder is alive and slow (a dead holder's lease
    /// always expires in the end: that is time passing, not a fault).
    pub expiries: u8,
    /// Attempts each intent's retry policy allows.
    pub max_attempts: u32,
    /// Lookups that may find nothing and look again, in a run (inside a consistency window;
    /// the bound keeps the run finite).
    pub early_looks: u8,
    /// Operator decisions (retry, resolve, cancel) in a run.
    pub decisions: u8,
    /// The protocol checked.
    pub variant: Variant,
}

/// The outbox phase a row is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// To be delivered.
    Deliver,
    /// To be looked up (reconciliation).
    Reconcile,
}

/// An intent's outbox row: the lease (its epoch and holder), the phase and the dispatch mark.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// Delivery attempts made since the last operator retry (a lookup is not one), counted at
    /// the dispatch mark where there is one, else at the record.
    pub attempts: u32,
    /// Delivery or reconciliation.
    pub phase: Phase,
}

impl Row {
    fn fresh() -> Row {
        Row {
            epoch: 0,
            leased: false,
            owner: None,
            dispatched: false,
            attempts: 0,
            phase: Phase::Deliver,
        }
    }
}

/// Where a worker is with the row it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// The claim decided the row needs no call: record this status (`unknown`: to be looked up).
    Skip(Status),
    /// A reconciliation claimed: the lookup is next.
    ToLookUp,
    /// The lookup answered: record what follows.
    LookedUp(AfterLookup),
}

/// What becomes of an outbox row at a record (the store's `Next`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowNext {
    /// Deleted: the work is finished.
    Done,
    /// Kept in its phase, to be claimed again.
    Retry,
    /// Moved from delivery to reconciliation.
    Reconcile,
    /// Moved from reconciliation back to delivery, to be sent again with the same key.
    Reissue,
}

/// What a worker's record writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// The intent.
    pub intent: usize,
    /// The phase of the row the worker holds.
    pub phase: Phase,
    /// The journal's new status.
    pub status: Status,
    /// What becomes of the row.
    pub next: RowNext,
    /// Delivery attempts made, this one included.
    pub attempts: u32,
}

/// What one worker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// A request to the intent's destination, carrying the intent's delivery key.
    Request {
        /// The intent.
        intent: usize,
        /// The delivery key it carries.
        key: SentKey,
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
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// Whether each intent's deadline has passed.
    pub deadline_passed: Vec<bool>,
    /// Whether each intent's consistency window has passed since its last dispatch mark and
    /// request (every request of it has arrived or is lost, and every effect is visible to a
    /// lookup).
    pub window_passed: Vec<bool>,
    /// Re-issues of each intent after a lookup past the window found nothing.
    pub reissues: Vec<u8>,
    /// A request arrived carrying another intent's key.
    pub wrong_key: bool,
    /// A write was applied for a lease that was no longer the row's.
    pub stale_write: bool,
    /// A status changed in a way the transition table does not allow.
    pub illegal: bool,
    /// A terminal status changed.
    pub terminal_changed: bool,
    /// An effect of a lane intent happened after an effect of a later intent of its lane.
    pub out_of_order: bool,
    /// Crashes so far.
    pub crashes: u8,
    /// Messages lost so far.
    pub losses: u8,
    /// Leases of live workers expired so far.
    pub expiries: u8,
    /// Lookups that found nothing and will look again, so far.
    pub early_looks: u8,
    /// Operator decisions so far.
    pub decisions: u8,
    /// Whether each intent's journal counts an attempt (its dispatch mark or a recorded attempt
    /// set the attempt count above 0).
    pub attempted: Vec<bool>,
    /// An operator moved an intent while automation owned it.
    pub operator_on_owned: bool,
    /// A destination executed a request for an intent already cancelled.
    pub effect_after_cancel: bool,
    /// The people who approved each intent, one bit each (person 0 submitted every intent).
    pub approved: Vec<u8>,
    /// Whether each intent's approval window has closed.
    pub approval_closed: Vec<bool>,
    /// A request was sent for an intent whose policy asks for more approvals than it has.
    pub sent_unapproved: bool,
    /// A worker recorded an intent succeeded while its destination had made no effect for it
    /// (the answer, or what a lookup found, was another intent's).
    pub borrowed_effect: bool,
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
    /// Worker `w` looks its intent's effect up and sees one (`true`) or nothing (`false`).
    LookUp(usize, bool),
    /// Worker `w` records what it learned, fenced on its epoch.
    Record(usize),
    /// Worker `w` crashes and forgets its job; its lease runs on until it expires.
    Crash(usize),
    /// Worker `w`'s renewer extends its lease, fenced on its epoch and holder; a worker whose
    /// lease was taken over abandons its call and writes nothing.
    Renew(usize),
    /// Worker `w` stops: it abandons its call and gives its lease back (fenced: the lease expires
    /// now, its holder is kept), so another worker takes the row at once. It counts as a crash.
    Release(usize),
    /// Intent `i`'s lease expires (its holder was slow or dead).
    Expire(usize),
    /// Intent `i`'s deadline passes.
    DeadlinePasses(usize),
    /// Intent `i`'s consistency window passes.
    WindowPasses(usize),
    /// An operator decides intent `i`: moves it to this status (`oncebox ops retry`, `resolve`,
    /// `cancel`), as the operator table allows.
    Decide(usize, Status),
    /// Person `p` approves intent `i`, awaiting approval (person 0 submitted it).
    Approve(usize, u8),
    /// A person rejects intent `i`, awaiting approval.
    Reject(usize),
    /// Intent `i`'s approval window closes.
    ApprovalCloses(usize),
}

/// People who may try to approve an intent; person 0 submitted it.
pub const PEOPLE: u8 = 3;

impl Action {
    /// Whether the action is a fault or a person's choice, not something the system does by
    /// itself: the liveness property asks where the system gets without them.
    fn is_fault_or_choice(self, state: &State) -> bool {
        match self {
            Action::Crash(_)
            | Action::Release(_)
            | Action::Lose(_)
            | Action::Decide(..)
            | Action::Approve(..)
            | Action::Reject(_) => true,
            Action::Expire(i) => holder_alive(state, i),
            _ => false,
        }
    }
}

/// Whether intent `i`'s lease is held by a live worker still working on it (its expiry is then
/// a slow worker, a fault; a dead holder's lease expiring is time passing).
fn holder_alive(state: &State, i: usize) -> bool {
    state.outbox[i].as_ref().is_some_and(|row| {
        row.owner
            .and_then(|w| state.workers[w])
            .is_some_and(|job| (job.intent, job.epoch) == (i, row.epoch))
    })
}

impl Protocol {
    /// The first bounds the test command checks: two workers, two intents in one lane to a
    /// destination that honours keys and one alone to a lookup destination; two crashes (a dead
    /// worker's lease expires), one lost message, one early lookup, two attempts each.
    pub fn small(variant: Variant) -> Protocol {
        Protocol {
            workers: 2,
            intents: vec![
                IntentSpec::in_lane(IdempotencyMode::Key, 0),
                IntentSpec::in_lane(IdempotencyMode::Key, 0),
                IntentSpec::alone(IdempotencyMode::Lookup),
            ],
            crashes: 2,
            losses: 1,
            expiries: 0,
            max_attempts: 2,
            early_looks: 1,
            decisions: 0,
            variant,
        }
    }

    /// A slow worker: two intents alone (one to a destination that honours keys, with a
    /// deadline; one to a destination that does neither), a live worker's lease expiring under
    /// it, two crashes and one lost message.
    pub fn slow_workers(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![
                IntentSpec::alone(IdempotencyMode::Key).with_deadline(),
                IntentSpec::alone(IdempotencyMode::None),
            ],
            expiries: 1,
            ..Protocol::small(variant)
        }
    }

    /// Reconciliation under faults: one intent to a lookup destination, with three crashes, two
    /// lost messages, three live workers' leases expiring and two early lookups.
    pub fn lookups(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![IntentSpec::alone(IdempotencyMode::Lookup)],
            crashes: 3,
            losses: 2,
            expiries: 3,
            early_looks: 2,
            ..Protocol::small(variant)
        }
    }

    /// An operator deciding once (retry, resolve or cancel, whichever the tables allow at any
    /// moment), over two intents alone (honours keys; neither), with one crash, one lost message
    /// and one live worker's lease expiring: operator decisions restart an intent's attempts,
    /// which multiplies the states. (A person resolving a lane's head while a stalled worker's
    /// request is still on its way can put the lane's effects out of order: the operations
    /// guide says so, and this model leaves lanes out.)
    pub fn with_operator(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![
                IntentSpec::alone(IdempotencyMode::Key),
                IntentSpec::alone(IdempotencyMode::None),
            ],
            crashes: 1,
            losses: 1,
            expiries: 1,
            decisions: 1,
            ..Protocol::small(variant)
        }
    }

    /// People approving, rejecting, or leaving intents to expire, racing two workers: an intent
    /// alone needing two approvals (to a destination that does neither, so a second request
    /// would show), a lane's head needing one and the intent behind it; one crash and one lost
    /// message.
    pub fn with_approvals(variant: Variant) -> Protocol {
        Protocol {
            workers: 2,
            intents: vec![
                IntentSpec::alone(IdempotencyMode::None).needing(2),
                IntentSpec::in_lane(IdempotencyMode::Key, 0).needing(1),
                IntentSpec::in_lane(IdempotencyMode::Key, 0),
            ],
            crashes: 1,
            losses: 1,
            early_looks: 0,
            ..Protocol::small(variant)
        }
    }

    /// Two tenants submitting one key to one destination that honours keys, with two crashes
    /// and one lost message.
    pub fn tenants(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![
                IntentSpec::alone(IdempotencyMode::Key).keyed(0, 0),
                IntentSpec::alone(IdempotencyMode::Key).keyed(1, 0),
            ],
            ..Protocol::small(variant)
        }
    }

    /// Two tenants submitting one key to one lookup destination, with two crashes, one lost
    /// message and one early lookup: a lookup by the key must find only its own tenant's effect.
    pub fn tenant_lookups(variant: Variant) -> Protocol {
        Protocol {
            intents: vec![
                IntentSpec::alone(IdempotencyMode::Lookup).keyed(0, 0),
                IntentSpec::alone(IdempotencyMode::Lookup).keyed(1, 0),
            ],
            ..Protocol::small(variant)
        }
    }

    /// Deeper bounds, for `scripts/model-check.sh --deep`: the lane and the lookup intent of
    /// [`Protocol::small`] with a deadline on the lane's head and a live worker's lease expiring.
    pub fn deep(variant: Variant) -> Protocol {
        let mut deep = Protocol {
            expiries: 1,
            ..Protocol::small(variant)
        };
        deep.intents[0] = deep.intents[0].with_deadline();
        deep
    }

    /// The models the test command checks, or with `ONCEBOX_MODEL_BOUNDS=deep` the deep one.
    ///
    /// # Errors
    /// Any other value of `ONCEBOX_MODEL_BOUNDS`, named: a misspelt request for the deep bounds
    /// must not quietly check the small ones.
    pub fn from_env(variant: Variant) -> Result<Vec<Protocol>, String> {
        Protocol::bounds(
            std::env::var("ONCEBOX_MODEL_BOUNDS").ok().as_deref(),
            variant,
        )
    }

    /// The models the bounds named `bounds` check: `None` or `""` the test command's, `deep`
    /// the deep one.
    ///
    /// # Errors
    /// Any other name, with the names there are.
    pub fn bounds(bounds: Option<&str>, variant: Variant) -> Result<Vec<Protocol>, String> {
        match bounds {
            Some("deep") => Ok(vec![Protocol::deep(variant)]),
            None | Some("") => Ok(vec![
                Protocol::small(variant),
                Protocol::slow_workers(variant),
                Protocol::lookups(variant),
            ]),
            Some(other) => Err(format!(
                "ONCEBOX_MODEL_BOUNDS={other:?} names no bounds: use \"deep\", or leave it unset \
                 for the test command's"
            )),
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

    /// The idempotency mode the worker acts on for intent `i` (the variant that re-sends
    /// without a lookup treats a lookup destination as one that honours keys).
    fn mode(&self, i: usize) -> IdempotencyMode {
        match self.intents[i].mode {
            IdempotencyMode::Lookup if self.variant == Variant::ResendWithoutLookup => {
                IdempotencyMode::Key
            }
            mode => mode,
        }
    }

    /// The intents of intent `i`'s lane submitted before it.
    fn earlier_in_lane(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let lane = self.intents[i].lane;
        (0..i).filter(move |j| lane.is_some() && self.intents[*j].lane == lane)
    }

    /// Whether intent `i` may be delivered as far as its lane goes: every earlier intent of its
    /// lane has released it (the store parks the others). The broken variant lets the second
    /// intent of a lane go while the first holds it.
    pub fn lane_open(&self, state: &State, i: usize) -> bool {
        let holding = self
            .earlier_in_lane(i)
            .filter(|j| !protocol::releases_lane(state.journal[*j], false))
            .count();
        holding == 0 || (self.variant == Variant::SecondLaneHead && holding == 1)
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
        Self::write_status(state, i, to, false);
    }

    /// Moves intent `i` to `to` as a worker's record does: the claim put the intent in flight
    /// even where the journal does not show it (a destination that honours keys skips the
    /// dispatch mark's write, so its intent is recorded from `pending` or `unknown`).
    fn record_status(state: &mut State, i: usize, to: Status) {
        Self::write_status(state, i, to, true);
    }

    fn write_status(state: &mut State, i: usize, to: Status, record: bool) {
        let from = state.journal[i];
        if from == to {
            return;
        }
        if from.is_terminal() {
            state.terminal_changed = true;
        }
        let claimed = matches!(from, Status::Pending | Status::Unknown)
            && from.transition(Status::InFlight).is_ok();
        let allowed = from.transition(to).is_ok()
            || ((from == Status::InFlight || (record && claimed)) && protocol::record_allowed(to));
        if !allowed {
            state.illegal = true;
        }
        state.journal[i] = to;
    }

    /// The store's checks before a cancel (`oncebox_store::ops::cancel`): no attempt recorded,
    /// and a delivery row that no worker holds or held (a lease that ran out, or was given back
    /// at a stop, keeps its holder: the call may have been sent) and that is not marked
    /// dispatched.
    pub fn cancellable(state: &State, i: usize) -> bool {
        !state.attempted[i]
            && state.outbox[i].as_ref().is_none_or(|row| {
                row.phase == Phase::Reconcile || (row.owner.is_none() && !row.dispatched)
            })
    }

    /// Worker `w`'s renewer: the lease is extended while `w` still holds it (even after it ran
    /// out, as long as no other worker took it); otherwise the call is abandoned.
    fn renew(state: &mut State, w: usize) {
        let Some(job) = state.workers[w] else {
            return;
        };
        match state.outbox[job.intent].as_mut() {
            Some(row) if (row.epoch, row.owner) == (job.epoch, Some(w)) => row.leased = true,
            _ => state.workers[w] = None,
        }
    }

    /// Worker `w` stops: its call is abandoned and its lease made to expire now, fenced; the
    /// holder and the dispatch mark stay, as a crashed worker's do (the call may have been sent).
    fn release(state: &mut State, w: usize) {
        let Some(job) = state.workers[w].take() else {
            return;
        };
        state.crashes += 1;
        if let Some(row) = state.outbox[job.intent].as_mut()
            && (row.epoch, row.owner) == (job.epoch, Some(w))
        {
            row.leased = false;
        }
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
                ..Row::fresh()
            }),
            _ => None,
        };
    }

    /// Distinct people other than the submitter who approved intent `i`.
    fn approvers(state: &State, i: usize) -> u8 {
        (state.approved[i] & !1).count_ones() as u8
    }

    /// Whether a person may approve or reject intent `i` now, as the store checks it: it awaits
    /// approval, its window is open and no worker holds its row (a worker holds it only to
    /// expire it).
    fn decidable(state: &State, i: usize) -> bool {
        state.journal[i] == Status::AwaitingApproval
            && !state.approval_closed[i]
            && state.outbox[i]
                .as_ref()
                .is_some_and(|row| row.owner.is_none() && !row.leased)
    }

    /// Person `p` approves intent `i` (`oncebox_store::approvals::approve`): the submitter is
    /// refused and each person counts once; the approval that completes what the policy asks
    /// releases the intent to `pending` and queues its row afresh. The broken variant releases
    /// it one approval short.
    fn approve(&self, state: &mut State, i: usize, p: u8) {
        if p == 0 || state.approved[i] & (1 << p) != 0 {
            return; // refused: nothing is written
        }
        state.approved[i] |= 1 << p;
        let needed = self.intents[i].approvals;
        let needed = match self.variant {
            Variant::OneApproverShort => needed.saturating_sub(1),
            _ => needed,
        };
        if Self::approvers(state, i) >= needed {
            Self::set_status(state, i, Status::Pending);
            state.outbox[i] = Some(Row {
                epoch: state.outbox[i].as_ref().map_or(0, |row| row.epoch),
                ..Row::fresh()
            });
        }
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
                row.attempts += 1;
            }
            Self::set_status(state, job.intent, Status::InFlight);
            // The store's attempt count rises at the mark; only a cancel asks for it.
            state.attempted[job.intent] |= self.decisions > 0;
            // The consistency window runs from the dispatch mark.
            state.window_passed[job.intent] = false;
            job.stage = Stage::ToSend;
            state.workers[w] = Some(job);
        } else {
            state.workers[w] = None;
        }
    }

    fn claim(&self, state: &mut State, w: usize, i: usize) {
        let mode = self.mode(i);
        let deadline_passed = state.deadline_passed[i];
        let awaiting = state.journal[i] == Status::AwaitingApproval;
        let Some(row) = state.outbox[i].as_mut() else {
            return;
        };
        row.epoch += 1;
        row.leased = true;
        row.owner = Some(w);
        let epoch = row.epoch;
        // A reconciliation shows as `reconciling` (fenced, at once); a delivery's status
        // changes at its dispatch mark or its record.
        let (stage, status) = match row.phase {
            Phase::Reconcile => (Stage::ToLookUp, Some(Status::Reconciling)),
            // Claimed only once its window closed: it expires, sending nothing.
            Phase::Deliver if awaiting => (Stage::Skip(Status::Expired), None),
            Phase::Deliver => {
                let stage = match protocol::claimed_row(row.dispatched, mode, deadline_passed) {
                    ClaimedRow::Send { mark }
                        if mark && self.variant != Variant::NoDispatchMark =>
                    {
                        Stage::ToMark
                    }
                    ClaimedRow::Send { .. } => Stage::ToSend,
                    ClaimedRow::LookUp => Stage::Skip(Status::Unknown),
                    ClaimedRow::NeedsReview => Stage::Skip(Status::NeedsReview),
                    ClaimedRow::Expire => Stage::Skip(Status::Expired),
                };
                (stage, None)
            }
        };
        if let Some(status) = status {
            Self::set_status(state, i, status);
        }
        state.workers[w] = Some(Job {
            intent: i,
            epoch,
            stage,
            retries: state.retries[i],
        });
    }

    /// Worker `w` looks intent `i`'s effect up and sees one or nothing; the core decides what
    /// that means.
    fn look_up(&self, state: &mut State, w: usize, seen: bool) {
        let Some(job) = state.workers[w] else {
            return;
        };
        let window_passed =
            state.window_passed[job.intent] && self.variant != Variant::NeverReissue;
        let seen = if seen {
            LookupSeen::OneAgreeing
        } else {
            LookupSeen::Nothing
        };
        let after = protocol::after_lookup(seen, window_passed);
        if after == AfterLookup::LookAgain {
            state.early_looks += 1;
        }
        state.workers[w] = Some(Job {
            stage: Stage::LookedUp(after),
            ..job
        });
    }

    /// What worker `w`'s record would write, as the worker decides it: `None` when its job is
    /// not at a record.
    pub fn decision(&self, state: &State, w: usize) -> Option<Decision> {
        let job = state.workers[w]?;
        let i = job.intent;
        let row = state.outbox[i].as_ref()?;
        let from = row.phase;
        // A call is one more attempt, counted at its dispatch mark where it has one.
        let called = matches!(job.stage, Stage::Answered | Stage::TimedOut);
        let attempts = row.attempts + u32::from(called && !row.dispatched);
        // The status, and what becomes of the row: deleted, or kept in this phase.
        let (status, keep) = match job.stage {
            Stage::Answered => (Status::Succeeded, None),
            Stage::TimedOut => {
                match protocol::after_unknown(self.mode(i), self.retry_left(attempts)) {
                    AfterUnknown::Resend => (Status::Unknown, Some(Phase::Deliver)),
                    AfterUnknown::LookUp => (Status::Unknown, Some(Phase::Reconcile)),
                    AfterUnknown::NeedsReview => (Status::NeedsReview, None),
                }
            }
            Stage::Skip(Status::Unknown) => (Status::Unknown, Some(Phase::Reconcile)),
            Stage::Skip(status) => (status, None),
            Stage::LookedUp(after) => (
                after.status(),
                match after {
                    AfterLookup::Succeeded | AfterLookup::NeedsReview => None,
                    AfterLookup::LookAgain => Some(Phase::Reconcile),
                    AfterLookup::Reissue => Some(Phase::Deliver),
                },
            ),
            Stage::ToMark | Stage::ToSend | Stage::Calling | Stage::ToLookUp => return None,
        };
        let next = match (from, keep) {
            (_, None) => RowNext::Done,
            (Phase::Deliver, Some(Phase::Reconcile)) => RowNext::Reconcile,
            (Phase::Reconcile, Some(Phase::Deliver)) => RowNext::Reissue,
            (_, Some(_)) => RowNext::Retry,
        };
        Some(Decision {
            intent: i,
            phase: from,
            status,
            next,
            attempts,
        })
    }

    /// Worker `w` records its job's outcome, fenced on its epoch.
    fn record(&self, state: &mut State, w: usize) {
        let decided = self.decision(state, w);
        let Some(job) = state.workers[w].take() else {
            return;
        };
        let Some(d) = decided else {
            return;
        };
        if !self.fenced(state, w, &job) {
            return; // the lease was lost: nothing is written
        }
        let i = d.intent;
        state.borrowed_effect |= d.status == Status::Succeeded && state.effects[i] == 0;
        state.attempted[i] |= self.decisions > 0 && d.attempts > 0;
        if d.next == RowNext::Reissue {
            state.reissues[i] = state.reissues[i].saturating_add(1);
        }
        match d.next {
            RowNext::Done => state.outbox[i] = None,
            next => {
                if let Some(row) = state.outbox[i].as_mut() {
                    row.leased = false;
                    row.owner = None;
                    row.attempts = d.attempts;
                    let phase = match next {
                        RowNext::Reconcile => Phase::Reconcile,
                        RowNext::Reissue => Phase::Deliver,
                        _ => row.phase,
                    };
                    // A reconciliation keeps the mark's dispatch time (its window runs from
                    // it); every other record clears it.
                    row.dispatched = row.dispatched && phase == Phase::Reconcile;
                    row.phase = phase;
                }
            }
        }
        Self::record_status(state, i, d.status);
    }

    fn execute(&self, state: &mut State, message: Message) {
        if let Message::Request {
            intent,
            key,
            worker,
            epoch,
            retries,
        } = message
        {
            // Requests are counted where a property reads them (a destination that honours
            // keys is judged by its effects): fewer distinct states.
            if retries == state.retries[intent] && !self.intents[intent].mode.honours_keys() {
                state.requests[intent] = state.requests[intent].saturating_add(1);
            }
            state.effect_after_cancel |= state.journal[intent] == Status::Cancelled;
            state.wrong_key |= key != self.delivery_key(intent);
            if !(self.intents[intent].mode.honours_keys() && self.effects_under(state, key) > 0) {
                state.effects[intent] = state.effects[intent].saturating_add(1);
                let lane = self.intents[intent].lane;
                state.out_of_order |= lane.is_some()
                    && (intent + 1..self.intents.len())
                        .any(|k| self.intents[k].lane == lane && state.effects[k] > 0);
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

    /// What worker `w`, holding `job`, may do next (and crash).
    fn job_actions(&self, state: &State, w: usize, job: &Job, actions: &mut Vec<Action>) {
        match job.stage {
            Stage::ToMark => actions.push(Action::Mark(w)),
            Stage::ToSend => actions.push(Action::Send(w)),
            Stage::Calling => actions.push(Action::Timeout(w)),
            Stage::ToLookUp => {
                let i = job.intent;
                // A lookup asks for the delivery key: it finds whatever was done under it.
                let found = self.effects_under(state, self.delivery_key(i));
                if found > 0 {
                    actions.push(Action::LookUp(w, true));
                }
                // Nothing is seen past the window only where there is nothing;
                // a look that will look again spends the early-look budget.
                let trusted = state.window_passed[i] && self.variant != Variant::NeverReissue;
                let nothing = if trusted {
                    found == 0
                } else {
                    (found == 0 || !state.window_passed[i]) && state.early_looks < self.early_looks
                };
                if nothing {
                    actions.push(Action::LookUp(w, false));
                }
            }
            Stage::Answered | Stage::TimedOut | Stage::Skip(_) | Stage::LookedUp(_) => {
                actions.push(Action::Record(w))
            }
        }
        if state.crashes < self.crashes {
            actions.push(Action::Crash(w));
        }
        // The renewer and a stop act on calls under way (after the mark, before the answer);
        // a renewal that changes nothing is left out.
        if matches!(job.stage, Stage::ToSend | Stage::Calling) {
            let row = state.outbox[job.intent].as_ref();
            let held = row.is_some_and(|r| (r.epoch, r.owner) == (job.epoch, Some(w)));
            if !held || row.is_some_and(|r| !r.leased) {
                actions.push(Action::Renew(w));
            }
            if held && state.crashes < self.crashes {
                actions.push(Action::Release(w));
            }
        }
    }

    /// What intent `i`'s requests carry: its tenant and its key, or in [`Variant::BareKey`]
    /// its key alone.
    pub fn delivery_key(&self, i: usize) -> SentKey {
        let spec = &self.intents[i];
        SentKey {
            tenant: (self.variant != Variant::BareKey).then_some(spec.tenant),
            key: spec.key.map_or(KeyName::Own(i), KeyName::Named),
        }
    }

    /// The effects a destination made under delivery key `key`, for whichever intent: what it
    /// replays for a repeated key, and what a lookup by that key finds.
    fn effects_under(&self, state: &State, key: SentKey) -> u8 {
        (0..self.intents.len())
            .filter(|&j| self.delivery_key(j) == key)
            .map(|j| state.effects[j])
            .fold(0, u8::saturating_add)
    }

    /// Worker `w` sends its request, carrying the intent's key.
    fn send(&self, state: &mut State, w: usize) {
        let Some(mut job) = state.workers[w] else {
            return;
        };
        let request = Message::Request {
            intent: job.intent,
            key: self.delivery_key(job.intent),
            worker: w,
            epoch: job.epoch,
            retries: job.retries,
        };
        insert(&mut state.network, request);
        let needed = self.intents[job.intent].approvals;
        state.sent_unapproved |= needed > 0 && Self::approvers(state, job.intent) < needed;
        state.window_passed[job.intent] = false;
        job.stage = Stage::Calling;
        state.workers[w] = Some(job);
    }

    /// Whether the system can still move by itself (without a fault or a person's choice).
    fn can_progress(&self, state: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(state, &mut actions);
        actions.iter().any(|a| !a.is_fault_or_choice(state))
    }
}

impl State {
    /// This state with its workers renumbered: worker `w` becomes `to[w]`.
    fn renumbered(&self, to: &[usize]) -> State {
        let mut s = self.clone();
        for (w, job) in self.workers.iter().enumerate() {
            s.workers[to[w]] = *job;
        }
        for row in s.outbox.iter_mut().flatten() {
            row.owner = row.owner.map(|w| to[w]);
        }
        for m in &mut s.network {
            match m {
                Message::Request { worker, .. } | Message::Answer { worker, .. } => {
                    *worker = to[*worker];
                }
            }
        }
        s.network.sort();
        s
    }
}

/// Workers are interchangeable: a state and the same state with its workers renumbered behave
/// alike, so the checker visits one of them (the least, under every renumbering).
impl Representative for State {
    fn representative(&self) -> Self {
        let mut best = self.clone();
        let mut to: Vec<usize> = (0..self.workers.len()).collect();
        permute(&mut to, 0, &mut |to| {
            let s = self.renumbered(to);
            if s < best {
                best = s;
            }
        });
        best
    }
}

/// Calls `f` with every ordering of `items[k..]` (the first `k` fixed).
fn permute(items: &mut [usize], k: usize, f: &mut impl FnMut(&[usize])) {
    if k == items.len() {
        f(items);
        return;
    }
    for j in k..items.len() {
        items.swap(k, j);
        permute(items, k + 1, f);
        items.swap(k, j);
    }
}

/// Whether intent `i` is in flight: its journal says so (dispatched, unknown or being looked
/// up), or a worker holds it under the row's current lease (claimed, maybe calling). A stalled
/// worker whose lease was taken over holds nothing: its writes are fenced out.
fn in_flight(state: &State, i: usize) -> bool {
    matches!(
        state.journal[i],
        Status::InFlight | Status::Unknown | Status::Reconciling
    ) || holder_alive(state, i)
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
        let held = |spec: &IntentSpec| match spec.approvals {
            0 => Status::Pending,
            _ => Status::AwaitingApproval,
        };
        vec![State {
            journal: self.intents.iter().map(held).collect(),
            outbox: vec![Some(Row::fresh()); n],
            workers: vec![None; usize::from(self.workers)],
            network: Vec::new(),
            requests: vec![0; n],
            retries: vec![0; n],
            effects: vec![0; n],
            deadline_passed: vec![false; n],
            window_passed: vec![false; n],
            reissues: vec![0; n],
            wrong_key: false,
            stale_write: false,
            illegal: false,
            terminal_changed: false,
            out_of_order: false,
            crashes: 0,
            losses: 0,
            expiries: 0,
            early_looks: 0,
            decisions: 0,
            attempted: vec![false; n],
            operator_on_owned: false,
            effect_after_cancel: false,
            approved: vec![0; n],
            approval_closed: vec![false; n],
            sent_unapproved: false,
            borrowed_effect: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (w, job) in state.workers.iter().enumerate() {
            match job {
                None => {
                    for (i, row) in state.outbox.iter().enumerate() {
                        // An intent awaiting approval is queued for its window's end.
                        let queued = state.journal[i] != Status::AwaitingApproval
                            || state.approval_closed[i];
                        let claimable = row.as_ref().is_some_and(|r| {
                            !r.leased
                                && (r.phase == Phase::Reconcile
                                    || (self.lane_open(state, i) && queued))
                        });
                        if claimable {
                            actions.push(Action::Claim(w, i));
                        }
                    }
                }
                Some(job) => self.job_actions(state, w, job, actions),
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
            let Some(row) = row else { continue };
            if row.leased && (!holder_alive(state, i) || state.expiries < self.expiries) {
                actions.push(Action::Expire(i));
            }
            // The window is assumed longer than any request's flight and any worker's stall
            // between its mark and its send: it passes only when neither is pending.
            let quiet = !state
                .network
                .iter()
                .any(|m| matches!(m, Message::Request { intent, .. } if *intent == i))
                && !state.workers.iter().flatten().any(|job| {
                    job.intent == i && matches!(job.stage, Stage::ToSend | Stage::ToMark)
                });
            if self.intents[i].mode == IdempotencyMode::Lookup
                && row.phase == Phase::Reconcile
                && !state.window_passed[i]
                && quiet
            {
                actions.push(Action::WindowPasses(i));
            }
        }
        for (i, spec) in self.intents.iter().enumerate() {
            if spec.deadline && !state.deadline_passed[i] && !state.journal[i].is_settled() {
                actions.push(Action::DeadlinePasses(i));
            }
            if Self::decidable(state, i) {
                // Every person tries, the submitter and those who approved already included:
                // the store refuses them, and nothing moves.
                actions.extend((0..PEOPLE).map(|p| Action::Approve(i, p)));
                actions.push(Action::Reject(i));
            }
            if state.journal[i] == Status::AwaitingApproval && !state.approval_closed[i] {
                actions.push(Action::ApprovalCloses(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Claim(w, i) => self.claim(&mut state, w, i),
            Action::Mark(w) => self.mark(&mut state, w),
            Action::Send(w) => self.send(&mut state, w),
            Action::Execute(m) => {
                remove(&mut state.network, &m);
                self.execute(&mut state, m);
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
            Action::LookUp(w, seen) => self.look_up(&mut state, w, seen),
            Action::Record(w) => self.record(&mut state, w),
            Action::Crash(w) => {
                state.workers[w] = None;
                state.crashes += 1;
            }
            Action::Renew(w) => Self::renew(&mut state, w),
            Action::Release(w) => Self::release(&mut state, w),
            Action::Decide(i, to) => self.decide(&mut state, i, to),
            Action::Expire(i) => {
                if holder_alive(&state, i) {
                    state.expiries += 1;
                }
                if let Some(row) = state.outbox[i].as_mut() {
                    row.leased = false;
                }
            }
            Action::DeadlinePasses(i) => state.deadline_passed[i] = true,
            Action::WindowPasses(i) => state.window_passed[i] = true,
            Action::Approve(i, p) => self.approve(&mut state, i, p),
            Action::Reject(i) => {
                Self::set_status(&mut state, i, Status::Rejected);
                state.outbox[i] = None;
            }
            Action::ApprovalCloses(i) => state.approval_closed[i] = true,
        }
        // An answer no worker waits for any more (its job recorded, crashed or was fenced out;
        // a new job has a new epoch) can only be dropped: drop it now, one state fewer.
        let workers = &state.workers;
        state.network.retain(|m| match *m {
            Message::Answer {
                intent,
                worker,
                epoch,
            } => workers[worker].is_some_and(|job| {
                (job.intent, job.epoch, job.stage) == (intent, epoch, Stage::Calling)
            }),
            Message::Request { .. } => true,
        });
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut all = vec![
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
                "no request is sent for an intent whose approvals are incomplete",
                |_, s: &State| !s.sent_unapproved,
            ),
            Property::always(
                "every request carries its intent's one key",
                |_, s: &State| !s.wrong_key,
            ),
            Property::always(TWO_INTENTS_TWO_EFFECTS, |_, s: &State| !s.borrowed_effect),
            Property::always(
                "a destination that honours keys makes at most one effect",
                |m: &Protocol, s: &State| {
                    m.intents
                        .iter()
                        .zip(&s.effects)
                        .all(|(spec, effects)| !spec.mode.honours_keys() || *effects <= 1)
                },
            ),
            Property::always(
                "a lookup destination is sent a second request only after a lookup past the window found nothing, and makes one effect",
                |m: &Protocol, s: &State| {
                    (0..m.intents.len()).all(|i| {
                        m.intents[i].mode != IdempotencyMode::Lookup
                            || (s.requests[i] <= 1 + s.reissues[i] && s.effects[i] <= 1)
                    })
                },
            ),
            Property::always(
                "a destination that does not is never sent a second request, unless a person retries",
                |m: &Protocol, s: &State| {
                    m.intents.iter().zip(&s.requests).all(|(spec, requests)| {
                        spec.mode != IdempotencyMode::None || *requests <= 1
                    })
                },
            ),
        ];
        all.extend(lane_properties());
        all
    }
}

/// The ordering lanes' properties and liveness.
fn lane_properties() -> Vec<Property<Protocol>> {
    vec![
        Property::always(
            "an ordering lane has at most one intent in flight",
            |m: &Protocol, s: &State| {
                m.intents.iter().filter_map(|spec| spec.lane).all(|lane| {
                    let in_flight = (0..m.intents.len())
                        .filter(|i| m.intents[*i].lane == Some(lane) && in_flight(s, *i));
                    in_flight.count() <= 1
                })
            },
        ),
        Property::always(
            "an ordering lane's effects happen in submit order",
            |_, s: &State| !s.out_of_order,
        ),
        Property::always(
            "liveness: once faults stop, every intent ends terminal, in needs_review or behind a lane head in it",
            |m: &Protocol, s: &State| {
                m.can_progress(s)
                    || (0..m.intents.len()).all(|i| {
                        let st = s.journal[i];
                        st.is_terminal()
                            || st == Status::NeedsReview
                            || (st == Status::Pending && !m.lane_open(s, i))
                    })
            },
        ),
    ]
}
