//! The protocol checked exhaustively within small bounds, and each mechanism shown to matter:
//! with it removed, the checker finds a counterexample and prints it as a readable trace.

use std::time::Instant;

use oncebox_model::{Protocol, Variant, properties};
use stateright::{Checker, HasDiscoveries, Model};

/// Checks `model` in every reachable state, one state per renumbering of the workers
/// (depth-first, on every core), and requires no counterexample to any property.
fn holds(model: Protocol) {
    let names: Vec<&str> = model.properties().iter().map(|p| p.name).collect();
    let bounds = format!("{model:?}");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = Instant::now();
    let checker = model
        .checker()
        .threads(threads)
        .symmetry()
        .spawn_dfs()
        .join();
    let seconds = started.elapsed().as_secs_f64();
    assert!(checker.is_done());
    for name in names {
        if let Some(path) = checker.discovery(name) {
            panic!("{name}: counterexample\n{}", trace(&path));
        }
    }
    eprintln!(
        "{bounds}: checked {} states ({} unique) in {seconds:.2} s",
        checker.state_count(),
        checker.unique_state_count()
    );
    assert!(
        checker.unique_state_count() > 100_000,
        "the model explored too little"
    );
}

#[test]
fn the_protocol_holds_every_property_in_every_reachable_state() {
    for model in Protocol::from_env(Variant::Correct).expect("ONCEBOX_MODEL_BOUNDS") {
        holds(model);
    }
}

#[test]
fn misspelt_bounds_are_refused_not_read_as_the_small_ones() {
    let refused = Protocol::bounds(Some("Deep"), Variant::Correct).expect_err("a typo");
    assert!(refused.contains("\"Deep\""), "{refused}");
    assert_eq!(
        Protocol::bounds(Some("deep"), Variant::Correct).map(|m| m.len()),
        Ok(1)
    );
    assert_eq!(
        Protocol::bounds(None, Variant::Correct).map(|m| m.len()),
        Ok(3)
    );
}

#[test]
fn the_protocol_holds_with_two_tenants_sharing_a_key() {
    holds(Protocol::tenants(Variant::Correct));
    holds(Protocol::tenant_lookups(Variant::Correct));
}

#[test]
fn sending_the_bare_key_makes_two_tenants_intents_one_effect() {
    finds(
        Protocol::tenants(Variant::BareKey),
        properties::TWO_INTENTS_TWO_EFFECTS,
    );
}

#[test]
fn looking_up_the_bare_key_finds_another_tenants_effect() {
    finds(
        Protocol::tenant_lookups(Variant::BareKey),
        properties::TWO_INTENTS_TWO_EFFECTS,
    );
}

#[test]
fn the_protocol_holds_with_an_operator_deciding() {
    holds(Protocol::with_operator(Variant::Correct));
}

#[test]
fn the_protocol_holds_with_people_approving() {
    holds(Protocol::with_approvals(Variant::Correct));
}

/// `path` as one line per step: the action, then the journal, the requests and effects each
/// destination received and the workers' jobs after it.
fn trace(path: &stateright::Path<oncebox_model::State, oncebox_model::Action>) -> String {
    let steps = path.clone().into_vec();
    let mut out = String::new();
    for (n, window) in steps.windows(2).enumerate() {
        let (_, Some(action)) = &window[0] else {
            continue;
        };
        let (after, _) = &window[1];
        out.push_str(&format!(
            "{:>3}. {action:?}\n     journal {:?}, requests {:?}, effects {:?}, workers {:?}\n",
            n + 1,
            after.journal,
            after.requests,
            after.effects,
            after.workers
        ));
    }
    out
}

/// Checks `model` (a broken variant) breadth-first, so the counterexample is a shortest one,
/// and requires a counterexample to `property`, printing it.
fn finds(model: Protocol, property: &'static str) {
    let variant = model.variant;
    let finish = HasDiscoveries::AnyOf([property].into_iter().collect());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let checker = model
        .checker()
        .threads(threads)
        .finish_when(finish)
        .spawn_bfs()
        .join();
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{variant:?}: no counterexample to {property:?}"));
    let text = trace(&path);
    eprintln!("{variant:?} breaks {property:?}:\n{text}");
    assert!(text.lines().count() >= 3, "{text}");
}

#[test]
fn without_the_fence_a_stale_lease_writes() {
    finds(
        Protocol::slow_workers(Variant::NoFence),
        properties::FENCING,
    );
}

#[test]
fn re_sending_an_unknown_outcome_without_a_lookup_makes_a_second_effect() {
    finds(
        Protocol::lookups(Variant::ResendWithoutLookup),
        properties::LOOKUP_BEFORE_RESEND,
    );
}

#[test]
fn a_second_lane_head_puts_two_intents_of_a_lane_in_flight() {
    finds(
        Protocol::small(Variant::SecondLaneHead),
        properties::ONE_IN_FLIGHT_PER_LANE,
    );
}

#[test]
fn a_second_lane_head_can_reorder_a_lanes_effects() {
    finds(
        Protocol::small(Variant::SecondLaneHead),
        properties::LANE_IN_ORDER,
    );
}

#[test]
fn a_lookup_that_never_trusts_nothing_found_leaves_an_intent_unknown() {
    finds(
        Protocol::lookups(Variant::NeverReissue),
        properties::LIVENESS,
    );
}

#[test]
fn without_the_dispatch_mark_a_destination_that_does_not_honour_keys_gets_a_second_request() {
    finds(
        Protocol::slow_workers(Variant::NoDispatchMark),
        properties::NO_RESEND_WITHOUT_KEYS,
    );
}

#[test]
fn releasing_an_intent_one_approver_short_sends_it_unapproved() {
    finds(
        Protocol::with_approvals(Variant::OneApproverShort),
        properties::NO_REQUEST_UNAPPROVED,
    );
}
