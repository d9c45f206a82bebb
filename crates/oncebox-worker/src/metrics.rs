//! A worker's Prometheus metrics: every name defined once in [`DEFINITIONS`], rendered in the
//! text exposition format and served at `/metrics` on `--metrics-addr` (see [`crate::probes`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use oncebox_serve::metric::{Def, Kind};

/// Delivery attempts by destination and outcome class.
pub const DELIVERIES_TOTAL: Def = Def {
    name: "oncebox_deliveries_total",
    kind: Kind::Counter,
    labels: &["destination", "outcome"],
    help: "Delivery attempts by destination and outcome class (succeeded, \
           retry_before_execution, permanent, unknown).",
};
/// Time from sending an attempt to its classified outcome.
pub const DELIVERY_SECONDS: Def = Def {
    name: "oncebox_delivery_seconds",
    kind: Kind::Histogram,
    labels: &["destination"],
    help: "Time from sending an attempt to its classified outcome.",
};
/// Approval requests sent to notify destinations, by outcome class.
pub const APPROVAL_REQUESTS_TOTAL: Def = Def {
    name: "oncebox_approval_requests_total",
    kind: Kind::Counter,
    labels: &["outcome"],
    help: "\"Approval requested\" messages sent to approval policies' notify destinations, by \
           outcome class (succeeded; permanent: refused, not sent again; \
           retry_before_execution and unknown: tried again).",
};
/// Outbox rows leased per claim.
pub const CLAIM_BATCH_SIZE: Def = Def {
    name: "oncebox_claim_batch_size",
    kind: Kind::Histogram,
    labels: &[],
    help: "Outbox rows leased per claim.",
};
/// Leases found taken over by another worker.
pub const LEASES_LOST_TOTAL: Def = Def {
    name: "oncebox_leases_lost_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Leases found taken over by another worker (work dropped, nothing written).",
};
/// Deliver rows ready and unleased.
pub const READY_DEPTH: Def = Def {
    name: "oncebox_ready_depth",
    kind: Kind::Gauge,
    labels: &[],
    help: "Deliver rows ready and unleased (capped at 100000).",
};
/// Age of the oldest ready deliver row.
pub const OLDEST_READY_AGE_SECONDS: Def = Def {
    name: "oncebox_oldest_ready_age_seconds",
    kind: Kind::Gauge,
    labels: &[],
    help: "Age of the oldest ready deliver row.",
};
/// When each worker loop last turned.
pub const LOOP_HEARTBEAT: Def = Def {
    name: "oncebox_loop_heartbeat_timestamp_seconds",
    kind: Kind::Gauge,
    labels: &["loop"],
    help: "When each worker loop (deliver, reconcile) last turned, in Unix seconds.",
};

/// Intents waiting for reconciliation or a person, by status.
pub const INTENTS_WAITING: Def = Def {
    name: "oncebox_intents_waiting",
    kind: Kind::Gauge,
    labels: &["status"],
    help: "Intents waiting for reconciliation or a person, by status (unknown, reconciling, \
           needs_review, awaiting_approval).",
};
/// How long the intent waiting longest in each status has waited.
pub const OLDEST_WAITING_AGE_SECONDS: Def = Def {
    name: "oncebox_oldest_waiting_age_seconds",
    kind: Kind::Gauge,
    labels: &["status"],
    help: "Seconds since the intent waiting longest in each status last changed (for \
           awaiting_approval: since it was submitted).",
};
/// Dead letters written but not yet published to the broker.
pub const DEAD_LETTERS_UNPUBLISHED: Def = Def {
    name: "oncebox_dead_letters_unpublished",
    kind: Kind::Gauge,
    labels: &[],
    help: "Dead letters written but not yet published to the broker.",
};
/// Age of the oldest unpublished dead letter.
pub const OLDEST_UNPUBLISHED_DEAD_LETTER_AGE_SECONDS: Def = Def {
    name: "oncebox_oldest_unpublished_dead_letter_age_seconds",
    kind: Kind::Gauge,
    labels: &[],
    help: "Seconds since the intent of the oldest unpublished dead letter entered its status.",
};

/// Each circuit breaker's state: 1 for the current one.
pub const DESTINATION_STATE: Def = Def {
    name: "oncebox_destination_state",
    kind: Kind::Gauge,
    labels: &["destination", "state"],
    help: "State of each destination with a circuit breaker or disabled: 1 for its current \
           state (closed, open or half_open for a breaker; disabled for a destination a 410 or \
           an operator disabled), 0 for the others.",
};

/// Ordering lanes held by a head that ended failed, expired or needs_review.
pub const LANES_BLOCKED: Def = Def {
    name: "oncebox_lanes_blocked",
    kind: Kind::Gauge,
    labels: &[],
    help: "Ordering lanes held by a head that ended failed, expired or needs_review, waiting \
           for an operator to retry, resolve or skip it.",
};

/// The states [`DESTINATION_STATE`] reports.
pub const BREAKER_STATES: [&str; 4] = ["closed", "open", "half_open", "disabled"];

/// The statuses [`INTENTS_WAITING`] reports, each always present (0 when none wait).
pub const WAITING_STATUSES: [&str; 4] = [
    "unknown",
    "reconciling",
    "needs_review",
    "awaiting_approval",
];

/// Every metric a worker exports.
pub const DEFINITIONS: &[Def] = &[
    DELIVERIES_TOTAL,
    DELIVERY_SECONDS,
    APPROVAL_REQUESTS_TOTAL,
    CLAIM_BATCH_SIZE,
    LEASES_LOST_TOTAL,
    READY_DEPTH,
    OLDEST_READY_AGE_SECONDS,
    LOOP_HEARTBEAT,
    INTENTS_WAITING,
    OLDEST_WAITING_AGE_SECONDS,
    DEAD_LETTERS_UNPUBLISHED,
    OLDEST_UNPUBLISHED_DEAD_LETTER_AGE_SECONDS,
    DESTINATION_STATE,
    LANES_BLOCKED,
];

/// The delivery loop's name in heartbeats and `/healthz`.
pub const LOOP_DELIVER: &str = "deliver";
/// The reconciliation loop's name in heartbeats and `/healthz`.
pub const LOOP_RECONCILE: &str = "reconcile";

const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];
const BATCH_BUCKETS: [f64; 8] = [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; bounds.len()];
        }
        for (i, b) in bounds.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, b) in bounds.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}",
                self.counts.get(i).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// A worker's metrics.
#[derive(Default)]
pub struct Metrics {
    deliveries: Mutex<BTreeMap<(String, &'static str), u64>>,
    asked: Mutex<BTreeMap<&'static str, u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    claim_batch: Mutex<Histogram>,
    leases_lost: AtomicU64,
    ready_depth: AtomicU64,
    oldest_ready_ms: AtomicU64,
    lanes_blocked: AtomicU64,
    heartbeats: Mutex<BTreeMap<&'static str, u64>>,
    /// Per [`WAITING_STATUSES`] and `dead_letter`: how many and the oldest's age in seconds.
    waiting: Mutex<BTreeMap<String, (i64, f64)>>,
    /// Destination → its circuit breaker's state.
    breakers: Mutex<BTreeMap<String, String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Metrics {
    /// Counts one delivery and its latency.
    pub fn delivered(&self, destination: &str, outcome: &'static str, seconds: f64) {
        *lock(&self.deliveries)
            .entry((destination.to_owned(), outcome))
            .or_insert(0) += 1;
        lock(&self.latency)
            .entry(destination.to_owned())
            .or_default()
            .observe(&LATENCY_BUCKETS, seconds);
    }

    /// Counts one approval request sent, by outcome class.
    pub fn asked(&self, outcome: &'static str) {
        *lock(&self.asked).entry(outcome).or_insert(0) += 1;
    }

    /// Records the size of a claim.
    pub fn claimed(&self, n: usize) {
        lock(&self.claim_batch).observe(&BATCH_BUCKETS, n as f64);
    }

    /// Counts leases found taken over (their work was dropped, nothing written).
    pub fn leases_lost(&self, n: usize) {
        self.leases_lost.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Sets the ready-queue gauges.
    pub fn ready(&self, depth: u64, oldest_age_ms: u64) {
        self.ready_depth.store(depth, Ordering::Relaxed);
        self.oldest_ready_ms.store(oldest_age_ms, Ordering::Relaxed);
    }

    /// Sets the blocked-lanes gauge.
    pub fn lanes_blocked(&self, n: u64) {
        self.lanes_blocked.store(n, Ordering::Relaxed);
    }

    /// Sets the waiting gauges from a reading of [`oncebox_store::waiting_gauges`]: a status
    /// missing from it has none waiting.
    pub fn waiting(&self, gauges: &[oncebox_store::WaitingGauge]) {
        let mut waiting = lock(&self.waiting);
        waiting.clear();
        for g in gauges {
            waiting.insert(g.gauge.clone(), (g.n, g.oldest_seconds.max(0.0)));
        }
    }

    /// Sets the circuit breaker gauges from a reading of the pool's breakers.
    pub fn breakers(&self, states: &[oncebox_store::breaker::DestinationState]) {
        let mut breakers = lock(&self.breakers);
        breakers.clear();
        for s in states {
            breakers.insert(s.destination.clone(), s.state.clone());
        }
    }

    /// Marks `loop_name` alive at `now_ms` (milliseconds since the Unix epoch).
    pub fn heartbeat(&self, loop_name: &'static str, now_ms: u64) {
        lock(&self.heartbeats).insert(loop_name, now_ms);
    }

    /// Stops watching `loop_name` (it ended on purpose, at shutdown).
    pub fn loop_ended(&self, loop_name: &'static str) {
        lock(&self.heartbeats).remove(loop_name);
    }

    /// `Ok` when every watched loop turned within `stuck_after_ms` of `now_ms`; otherwise the
    /// loops that did not and for how long.
    pub fn liveness(&self, now_ms: u64, stuck_after_ms: u64) -> Result<(), String> {
        let stuck: Vec<String> = lock(&self.heartbeats)
            .iter()
            .filter(|(_, beat)| now_ms.saturating_sub(**beat) > stuck_after_ms)
            .map(|(name, beat)| {
                format!(
                    "{name} loop has not turned for {} ms",
                    now_ms.saturating_sub(*beat)
                )
            })
            .collect();
        if stuck.is_empty() {
            Ok(())
        } else {
            Err(stuck.join("; "))
        }
    }

    /// The deliveries counted so far, every outcome and destination.
    pub fn deliveries_total(&self) -> u64 {
        lock(&self.deliveries).values().sum()
    }

    /// The deliveries counted so far with `outcome`, over all destinations.
    pub fn deliveries_with(&self, outcome: &str) -> u64 {
        lock(&self.deliveries)
            .iter()
            .filter(|((_, o), _)| *o == outcome)
            .map(|(_, n)| n)
            .sum()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_deliveries(&mut out);
        self.render_scalars(&mut out);
        self.render_waiting(&mut out);
        self.render_breakers(&mut out);
        LOOP_HEARTBEAT.header(&mut out);
        for (name, ms) in lock(&self.heartbeats).iter() {
            let _ = writeln!(
                out,
                "{}{{loop=\"{name}\"}} {}",
                LOOP_HEARTBEAT.name,
                *ms as f64 / 1000.0
            );
        }
        out
    }

    /// The delivery counters and histograms, and the claim batch histogram.
    fn render_deliveries(&self, out: &mut String) {
        DELIVERIES_TOTAL.header(out);
        for ((dest, outcome), n) in lock(&self.deliveries).iter() {
            let _ = writeln!(
                out,
                "{}{{destination=\"{}\",outcome=\"{outcome}\"}} {n}",
                DELIVERIES_TOTAL.name,
                LabelValue(dest)
            );
        }
        DELIVERY_SECONDS.header(out);
        for (dest, h) in lock(&self.latency).iter() {
            h.render(
                out,
                DELIVERY_SECONDS.name,
                &format!("destination=\"{}\"", LabelValue(dest)),
                &LATENCY_BUCKETS,
            );
        }
        APPROVAL_REQUESTS_TOTAL.header(out);
        for (outcome, n) in lock(&self.asked).iter() {
            let _ = writeln!(
                out,
                "{}{{outcome=\"{outcome}\"}} {n}",
                APPROVAL_REQUESTS_TOTAL.name
            );
        }
        CLAIM_BATCH_SIZE.header(out);
        lock(&self.claim_batch).render(out, CLAIM_BATCH_SIZE.name, "", &BATCH_BUCKETS);
    }

    /// The unlabelled counters and gauges.
    fn render_scalars(&self, out: &mut String) {
        let scalars = [
            (
                LEASES_LOST_TOTAL,
                self.leases_lost.load(Ordering::Relaxed) as f64,
            ),
            (READY_DEPTH, self.ready_depth.load(Ordering::Relaxed) as f64),
            (
                OLDEST_READY_AGE_SECONDS,
                self.oldest_ready_ms.load(Ordering::Relaxed) as f64 / 1000.0,
            ),
            (
                LANES_BLOCKED,
                self.lanes_blocked.load(Ordering::Relaxed) as f64,
            ),
        ];
        for (def, value) in scalars {
            def.header(out);
            let _ = writeln!(out, "{} {value}", def.name);
        }
    }

    /// The waiting gauges and the unpublished dead letters.
    fn render_waiting(&self, out: &mut String) {
        let waiting = lock(&self.waiting);
        let of = |gauge: &str| waiting.get(gauge).copied().unwrap_or((0, 0.0));
        INTENTS_WAITING.header(out);
        for status in WAITING_STATUSES {
            let (n, _) = of(status);
            let _ = writeln!(out, "{}{{status=\"{status}\"}} {n}", INTENTS_WAITING.name);
        }
        OLDEST_WAITING_AGE_SECONDS.header(out);
        for status in WAITING_STATUSES {
            let (_, age) = of(status);
            let name = OLDEST_WAITING_AGE_SECONDS.name;
            let _ = writeln!(out, "{name}{{status=\"{status}\"}} {age}");
        }
        let (n, age) = of("dead_letter");
        DEAD_LETTERS_UNPUBLISHED.header(out);
        let _ = writeln!(out, "{} {n}", DEAD_LETTERS_UNPUBLISHED.name);
        OLDEST_UNPUBLISHED_DEAD_LETTER_AGE_SECONDS.header(out);
        let name = OLDEST_UNPUBLISHED_DEAD_LETTER_AGE_SECONDS.name;
        let _ = writeln!(out, "{name} {age}");
    }

    /// One gauge per destination and breaker state, 1 for the current state.
    fn render_breakers(&self, out: &mut String) {
        DESTINATION_STATE.header(out);
        for (dest, current) in lock(&self.breakers).iter() {
            for state in BREAKER_STATES {
                let on = u8::from(state == current);
                let name = DESTINATION_STATE.name;
                let dest = LabelValue(dest);
                let _ = writeln!(
                    out,
                    "{name}{{destination=\"{dest}\",state=\"{state}\"}} {on}"
                );
            }
        }
    }
}

/// A label value as the exposition format writes it: `\`, `"` and a line break escaped, so
/// that a configured name (a destination's may hold any printable character) cannot end the
/// value early or break the line.
struct LabelValue<'a>(&'a str);

impl std::fmt::Display for LabelValue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::fmt::Write as _;
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_stops_turning_is_stuck() {
        let m = Metrics::default();
        assert!(m.liveness(10_000, 1_000).is_ok(), "no loop yet: alive");
        m.heartbeat(LOOP_DELIVER, 9_500);
        m.heartbeat(LOOP_RECONCILE, 5_000);
        let why = m.liveness(10_000, 1_000).expect_err("reconcile is stuck");
        assert!(
            why.contains("reconcile loop has not turned for 5000 ms"),
            "{why}"
        );
        assert!(!why.contains("deliver"), "{why}");
        m.loop_ended(LOOP_RECONCILE);
        assert!(m.liveness(10_000, 1_000).is_ok());
        assert!(
            m.render()
                .lines()
                .any(|l| l == "oncebox_loop_heartbeat_timestamp_seconds{loop=\"deliver\"} 9.5")
        );
    }

    #[test]
    fn a_destination_name_with_quotes_and_backslashes_is_escaped() {
        let m = Metrics::default();
        m.delivered(r#"a"b\c"#, "succeeded", 0.01);
        let text = m.render();
        let line = r#"oncebox_deliveries_total{destination="a\"b\\c",outcome="succeeded"} 1"#;
        assert!(text.lines().any(|l| l == line), "{text}");
        assert!(
            text.contains(r#"oncebox_delivery_seconds_count{destination="a\"b\\c"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn every_series_rendered_is_defined_once_with_help_and_type() {
        let m = Metrics::default();
        m.delivered("billing", "succeeded", 0.01);
        m.claimed(3);
        m.heartbeat(LOOP_DELIVER, 1);
        let text = m.render();
        for def in DEFINITIONS {
            assert_eq!(
                text.lines()
                    .filter(|l| *l == format!("# TYPE {} {}", def.name, def.kind.as_str()))
                    .count(),
                1,
                "{} declared once",
                def.name
            );
        }
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            assert!(
                DEFINITIONS
                    .iter()
                    .any(|d| name == d.name
                        || (d.kind == Kind::Histogram && name.starts_with(d.name))),
                "{name} is not defined"
            );
        }
    }
}
