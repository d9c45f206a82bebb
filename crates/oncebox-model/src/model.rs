//! The protocol as stateright's `Model`: its initial state, the steps enabled in a state, and
//! the state each leads to.

use oncebox_core::config::IdempotencyMode;
use oncebox_core::status::Status;
use stateright::{Model, Property};

use crate::spec::{IntentSpec, Protocol};
use crate::state::{Action, Job, Message, PEOPLE, Phase, Row, Stage, State, holder_alive, remove};

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
        crate::properties::all()
    }
}
