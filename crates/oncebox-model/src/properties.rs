//! What the checker holds the protocol to. Each property's name is a constant here, so that the
//! tests that break a mechanism name the property they expect the checker to find broken.

use oncebox_core::config::IdempotencyMode;
use oncebox_core::status::Status;
use stateright::Property;

use crate::spec::Protocol;
use crate::state::{State, in_flight};

/// A write under a lease that is no longer current is never applied.
pub const FENCING: &str = "fencing: a stale lease never writes";

/// A terminal status is left only by an operator override the status table lists.
pub const TERMINAL_STAYS: &str =
    "a terminal status changes only by the operator override the table lists";

/// Every status change is one the status table allows.
pub const IN_THE_TABLE: &str = "every status change is in the table";

/// An operator never moves an intent that automation owns.
pub const OPERATOR_NEVER_ON_OWNED: &str = "an operator never moves an intent automation owns";

/// A cancelled intent makes no effect after the cancel.
pub const NO_EFFECT_AFTER_CANCEL: &str = "a cancelled intent has no effect after its cancel";

/// No request leaves for an intent its approvals still hold.
pub const NO_REQUEST_UNAPPROVED: &str =
    "no request is sent for an intent whose approvals are incomplete";

/// Every request carries its intent's one key.
pub const ONE_KEY_PER_INTENT: &str = "every request carries its intent's one key";

/// A destination that honours keys makes at most one effect per intent.
pub const AT_MOST_ONE_EFFECT: &str = "a destination that honours keys makes at most one effect";

/// A lookup destination gets a second request only after a lookup past its window found nothing.
pub const LOOKUP_BEFORE_RESEND: &str = "a lookup destination is sent a second request only after a lookup past the window found nothing, and makes one effect";

/// A destination that honours no key gets one request, unless a person retries.
pub const NO_RESEND_WITHOUT_KEYS: &str =
    "a destination that does not is never sent a second request, unless a person retries";

/// An ordering lane has at most one intent in flight.
pub const ONE_IN_FLIGHT_PER_LANE: &str = "an ordering lane has at most one intent in flight";

/// An ordering lane's effects happen in submit order.
pub const LANE_IN_ORDER: &str = "an ordering lane's effects happen in submit order";

/// Once faults stop, every intent ends terminal, in `needs_review`, or waiting behind its lane's
/// head there.
pub const LIVENESS: &str = "liveness: once faults stop, every intent ends terminal, in needs_review or behind a lane head in it";

/// The property that two tenants' intents under one key are two effects: no intent is
/// recorded succeeded on an effect its destination made for another.
pub const TWO_INTENTS_TWO_EFFECTS: &str = "two intents, two effects: no intent succeeds on an effect made for another, even under another tenant's same key";

/// Every property the checker holds the protocol to.
pub(crate) fn all() -> Vec<Property<Protocol>> {
    let mut all = vec![
        Property::always(FENCING, |_, s: &State| !s.stale_write),
        Property::always(TERMINAL_STAYS, |_, s: &State| !s.terminal_changed),
        Property::always(IN_THE_TABLE, |_, s: &State| !s.illegal),
        Property::always(OPERATOR_NEVER_ON_OWNED, |_, s: &State| !s.operator_on_owned),
        Property::always(NO_EFFECT_AFTER_CANCEL, |_, s: &State| {
            !s.effect_after_cancel
        }),
        Property::always(NO_REQUEST_UNAPPROVED, |_, s: &State| !s.sent_unapproved),
        Property::always(ONE_KEY_PER_INTENT, |_, s: &State| !s.wrong_key),
        Property::always(TWO_INTENTS_TWO_EFFECTS, |_, s: &State| !s.borrowed_effect),
        Property::always(AT_MOST_ONE_EFFECT, |m: &Protocol, s: &State| {
            m.intents
                .iter()
                .zip(&s.effects)
                .all(|(spec, effects)| !spec.mode.honours_keys() || *effects <= 1)
        }),
        Property::always(LOOKUP_BEFORE_RESEND, |m: &Protocol, s: &State| {
            (0..m.intents.len()).all(|i| {
                m.intents[i].mode != IdempotencyMode::Lookup
                    || (s.requests[i] <= 1 + s.reissues[i] && s.effects[i] <= 1)
            })
        }),
        Property::always(NO_RESEND_WITHOUT_KEYS, |m: &Protocol, s: &State| {
            m.intents
                .iter()
                .zip(&s.requests)
                .all(|(spec, requests)| spec.mode != IdempotencyMode::None || *requests <= 1)
        }),
    ];
    all.extend(lane_properties());
    all
}

/// The ordering lanes' properties and liveness.
fn lane_properties() -> Vec<Property<Protocol>> {
    vec![
        Property::always(ONE_IN_FLIGHT_PER_LANE, |m: &Protocol, s: &State| {
            m.intents.iter().filter_map(|spec| spec.lane).all(|lane| {
                let in_flight = (0..m.intents.len())
                    .filter(|i| m.intents[*i].lane == Some(lane) && in_flight(s, *i));
                in_flight.count() <= 1
            })
        }),
        Property::always(LANE_IN_ORDER, |_, s: &State| !s.out_of_order),
        Property::always(LIVENESS, |m: &Protocol, s: &State| {
            m.can_progress(s)
                || (0..m.intents.len()).all(|i| {
                    let st = s.journal[i];
                    st.is_terminal()
                        || st == Status::NeedsReview
                        || (st == Status::Pending && !m.lane_open(s, i))
                })
        }),
    ]
}
