//! A state of the world (journal, outbox, workers, network, destinations) and the steps that
//! move it.

use oncebox_core::protocol::AfterLookup;
use oncebox_core::status::Status;

use crate::spec::SentKey;

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
    pub(crate) fn fresh() -> Row {
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
    pub(crate) fn is_fault_or_choice(self, state: &State) -> bool {
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
pub(crate) fn holder_alive(state: &State, i: usize) -> bool {
    state.outbox[i].as_ref().is_some_and(|row| {
        row.owner
            .and_then(|w| state.workers[w])
            .is_some_and(|job| (job.intent, job.epoch) == (i, row.epoch))
    })
}

/// Whether intent `i` is in flight: its journal says so (dispatched, unknown or being looked
/// up), or a worker holds it under the row's current lease (claimed, maybe calling). A stalled
/// worker whose lease was taken over holds nothing: its writes are fenced out.
pub(crate) fn in_flight(state: &State, i: usize) -> bool {
    matches!(
        state.journal[i],
        Status::InFlight | Status::Unknown | Status::Reconciling
    ) || holder_alive(state, i)
}

/// Adds `m` to the sorted set `network`.
pub(crate) fn insert(network: &mut Vec<Message>, m: Message) {
    if let Err(at) = network.binary_search(&m) {
        network.insert(at, m);
    }
}

/// Removes `m` from the sorted set `network`.
pub(crate) fn remove(network: &mut Vec<Message>, m: &Message) {
    if let Ok(at) = network.binary_search(m) {
        network.remove(at);
    }
}
