//! Prometheus metric definitions: each metric's name, type, labels and help written once, as a
//! constant the code renders from and the metrics reference (docs/reference/metrics.md) is
//! generated from.

use std::fmt::Write as _;

/// The Prometheus type of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets, with `_bucket`, `_sum` and `_count` series.
    Histogram,
}

impl Kind {
    /// The name in `# TYPE` lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric a binary exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Def {
    /// Its name, such as `oncebox_deliveries_total`.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its labels (each with a bounded set of values).
    pub labels: &'static [&'static str],
    /// What it measures.
    pub help: &'static str,
}

impl Def {
    /// Writes the `# HELP` and `# TYPE` lines.
    pub fn header(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind.as_str());
    }
}

/// The text exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";
