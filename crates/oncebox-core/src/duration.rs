//! Durations as people write them in config files and on the command line: a whole number and
//! a unit — `250ms`, `10s`, `5m`, `1h`, `30d`. [`HumanDuration`] may be zero; [`NonZeroDuration`]
//! is for the settings where zero means nothing (a timeout, a lease, a poll interval) and so
//! cannot hold it.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1_000),
    ("ms", 1),
];

/// Why a duration was refused; its message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The text does not start with a whole number.
    #[error("{0:?} is not a duration such as \"250ms\", \"10s\", \"5m\" or \"1h\"")]
    NotANumber(String),
    /// The number has no unit, or one that is not `ms`, `s`, `m`, `h` or `d`.
    #[error("{0:?} has no unit; write it like \"250ms\", \"10s\", \"5m\" or \"1h\"")]
    NoUnit(String),
    /// The duration is zero where zero means nothing.
    #[error("{0:?}: must be more than zero")]
    Zero(String),
}

/// Parses "250ms", "10s", "5m", "1h", "30d" (a whole number and a unit).
///
/// # Errors
/// [`DurationError`], whose message says what is accepted.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| DurationError::NotANumber(text.to_owned()))?;
    let Some((_, ms)) = UNITS.iter().find(|(u, _)| *u == unit) else {
        return Err(DurationError::NoUnit(text.to_owned()));
    };
    Ok(Duration::from_millis(n.saturating_mul(*ms)))
}

/// Writes `d` in the largest unit that states it exactly ("90s", "2m", "250ms"); sub-millisecond
/// parts are dropped.
pub fn format_duration(d: Duration) -> String {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return "0s".into();
    }
    let (unit, size) = UNITS
        .iter()
        .find(|(_, size)| ms % size == 0)
        .copied()
        .unwrap_or(("ms", 1));
    format!("{}{unit}", ms / size)
}

/// A duration written as `10s`, `5m`…; zero allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl FromStr for HumanDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, DurationError> {
        parse_duration(s).map(HumanDuration)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl From<Duration> for HumanDuration {
    fn from(d: Duration) -> Self {
        HumanDuration(d)
    }
}

impl<'de> serde::Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A duration that cannot be zero: a timeout, a lease, an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NonZeroDuration(Duration);

impl NonZeroDuration {
    /// `d`, unless it is zero.
    pub const fn new(d: Duration) -> Option<NonZeroDuration> {
        if d.is_zero() {
            None
        } else {
            Some(NonZeroDuration(d))
        }
    }

    /// `secs` seconds; zero is taken as one second (for constants).
    pub const fn from_secs(secs: u64) -> NonZeroDuration {
        NonZeroDuration(Duration::from_secs(if secs == 0 { 1 } else { secs }))
    }

    /// `ms` milliseconds; zero is taken as one millisecond (for constants).
    pub const fn from_millis(ms: u64) -> NonZeroDuration {
        NonZeroDuration(Duration::from_millis(if ms == 0 { 1 } else { ms }))
    }

    /// The duration, never zero.
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl FromStr for NonZeroDuration {
    type Err = DurationError;

    fn from_str(s: &str) -> Result<Self, DurationError> {
        let d = parse_duration(s)?;
        NonZeroDuration::new(d).ok_or_else(|| DurationError::Zero(s.to_owned()))
    }
}

impl fmt::Display for NonZeroDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for NonZeroDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_print_in_the_largest_exact_unit() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert!(parse_duration("10").is_err(), "a unit is required");
        assert!(parse_duration("ten s").is_err());
        assert!(parse_duration("1.5s").is_err());
        for text in ["250ms", "30s", "5m", "1h", "30d", "90s", "1500ms"] {
            let d: HumanDuration = text.parse().expect("parses");
            assert_eq!(d.to_string(), text);
        }
        assert_eq!(HumanDuration(Duration::ZERO).to_string(), "0s");
        assert!("0s".parse::<NonZeroDuration>().is_err());
        assert_eq!(
            "2s".parse::<NonZeroDuration>().map(NonZeroDuration::get),
            Ok(Duration::from_secs(2))
        );
    }
}
