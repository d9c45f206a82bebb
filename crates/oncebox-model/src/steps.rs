//! What each step does to a state: the claim, the send, the record, the lookups, the people's
//! decisions, under the store's fence.

use std::time::{Duration, SystemTime};

use oncebox_core::RetryPolicy;
use oncebox_core::config::IdempotencyMode;
use oncebox_core::protocol::{self, AfterLookup, AfterUnknown, ClaimedRow, LookupSeen};
use oncebox_core::retry::RetryDecision;
use oncebox_core::status::Status;
use stateright::Model;

use crate::spec::{KeyName, Protocol, SentKey, Variant};
use crate::state::{Action, Decision, Job, Message, Phase, RowNext, Stage, State, insert};

impl Protocol {
    /// Whether intent `i` may still be attempted after `made` attempts: the retry policy decides.
    pub(crate) fn retry_left(&self, made: u32) -> bool {
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
    pub(crate) fn mode(&self, i: usize) -> IdempotencyMode {
        match self.intents[i].mode {
            IdempotencyMode::Lookup if self.variant == Variant::ResendWithoutLookup => {
                IdempotencyMode::Key
            }
            mode => mode,
        }
    }

    /// The intents of intent `i`'s lane submitted before it.
    pub(crate) fn earlier_in_lane(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
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
    pub(crate) fn fenced(&self, state: &mut State, w: usize, job: &Job) -> bool {
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
    pub(crate) fn set_status(state: &mut State, i: usize, to: Status) {
        Self::write_status(state, i, to, false);
    }

    /// Moves intent `i` to `to` as a worker's record does: the claim put the intent in flight
    /// even where the journal does not show it (a destination that honours keys skips the
    /// dispatch mark's write, so its intent is recorded from `pending` or `unknown`).
    pub(crate) fn record_status(state: &mut State, i: usize, to: Status) {
        Self::write_status(state, i, to, true);
    }

    pub(crate) fn write_status(state: &mut State, i: usize, to: Status, record: bool) {
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

    /// Worker `w`'s renewer: the lease is extended while `w` still holds it (even after it ran
    /// out, as long as no other worker took it); otherwise the call is abandoned.
    pub(crate) fn renew(state: &mut State, w: usize) {
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
    pub(crate) fn release(state: &mut State, w: usize) {
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

    /// Worker `w` marks its row dispatched, fenced; a worker whose lease was lost drops its job
    /// and sends nothing.
    pub(crate) fn mark(&self, state: &mut State, w: usize) {
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

    pub(crate) fn claim(&self, state: &mut State, w: usize, i: usize) {
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
    pub(crate) fn look_up(&self, state: &mut State, w: usize, seen: bool) {
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
    pub(crate) fn record(&self, state: &mut State, w: usize) {
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

    pub(crate) fn execute(&self, state: &mut State, message: Message) {
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
    pub(crate) fn job_actions(
        &self,
        state: &State,
        w: usize,
        job: &Job,
        actions: &mut Vec<Action>,
    ) {
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
    pub(crate) fn effects_under(&self, state: &State, key: SentKey) -> u8 {
        (0..self.intents.len())
            .filter(|&j| self.delivery_key(j) == key)
            .map(|j| state.effects[j])
            .fold(0, u8::saturating_add)
    }

    /// Worker `w` sends its request, carrying the intent's key.
    pub(crate) fn send(&self, state: &mut State, w: usize) {
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
    pub(crate) fn can_progress(&self, state: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(state, &mut actions);
        actions.iter().any(|a| !a.is_fault_or_choice(state))
    }
}
