//! The protocol checked exhaustively within small bounds, and each mechanism shown to matter:
//! with it removed, the checker finds a counterexample and prints it as a readable trace.

use std::time::Instant;

use oncebox_model::{Protocol, Variant};
use stateright::{Checker, HasDiscoveries, Model};

/// Runs the checker on every core over every reachable state of `model` (or until `finish`);
/// returns it with the time taken.
fn check(model: Protocol, finish: HasDiscoveries) -> (impl Checker<Protocol>, f64) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let started = Instant::now();
    let checker = model
        .checker()
        .threads(threads)
        .finish_when(finish)
        .spawn_bfs()
        .join();
    (checker, started.elapsed().as_secs_f64())
}

/// Checks `model` in every reachable state and requires no counterexample to any property.
fn holds(model: Protocol) {
    let names: Vec<&str> = model.properties().iter().map(|p| p.name).collect();
    let bounds = format!("{model:?}");
    let (checker, seconds) = check(model, HasDiscoveries::All);
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
        checker.unique_state_count() > 1000,
        "the model explored too little"
    );
}

#[test]
fn the_protocol_holds_every_property_in_every_reachable_state() {
    holds(Protocol::from_env(Variant::Correct));
}

#[test]
fn the_protocol_holds_with_an_operator_deciding() {
    holds(Protocol::with_operator(Variant::Correct));
}

/// `path` as one line per step: the action, then the journal, the requests each destination
/// received and the workers' jobs after it.
fn trace(path: &stateright::Path<oncebox_model::State, oncebox_model::Action>) -> String {
    let steps = path.clone().into_vec();
    let mut out = String::new();
    for (n, window) in steps.windows(2).enumerate() {
        let (_, Some(action)) = &window[0] else {
            continue;
        };
        let (after, _) = &window[1];
        out.push_str(&format!(
            "{:>3}. {action:?}\n     journal {:?}, requests {:?}, workers {:?}\n",
            n + 1,
            after.journal,
            after.requests,
            after.workers
        ));
    }
    out
}

/// Checks `variant` and requires a counterexample to `property`, printing it.
fn finds(variant: Variant, property: &'static str) {
    let finish = HasDiscoveries::AnyOf([property].into_iter().collect());
    let (checker, _) = check(Protocol::small(variant), finish);
    let path = checker
        .discovery(property)
        .unwrap_or_else(|| panic!("{variant:?}: no counterexample to {property:?}"));
    let text = trace(&path);
    eprintln!("{variant:?} breaks {property:?}:\n{text}");
    assert!(text.lines().count() >= 3, "{text}");
}

#[test]
fn without_the_fence_a_stale_lease_writes() {
    finds(Variant::NoFence, "fencing: a stale lease never writes");
}

#[test]
fn without_the_dispatch_mark_a_destination_that_does_not_honour_keys_gets_a_second_request() {
    finds(
        Variant::NoDispatchMark,
        "a destination that does not is never sent a second request, unless a person retries",
    );
}
