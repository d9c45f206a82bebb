//! What operators and people do: cancel, retry and resolve (the operator table), approve and
//! reject (the approval policy).

use oncebox_core::status::Status;

use crate::spec::{Protocol, Variant};
use crate::state::{Phase, Row, State};

impl Protocol {
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

    /// An operator's decision: the operator table says which; the outbox row is removed (cancel,
    /// resolve) or queued afresh, unleased and undispatched, with a new retry budget (retry).
    pub(crate) fn decide(&self, state: &mut State, i: usize, to: Status) {
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
    pub(crate) fn approvers(state: &State, i: usize) -> u8 {
        (state.approved[i] & !1).count_ones() as u8
    }

    /// Whether a person may approve or reject intent `i` now, as the store checks it: it awaits
    /// approval, its window is open and no worker holds its row (a worker holds it only to
    /// expire it).
    pub(crate) fn decidable(state: &State, i: usize) -> bool {
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
    pub(crate) fn approve(&self, state: &mut State, i: usize, p: u8) {
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
}
