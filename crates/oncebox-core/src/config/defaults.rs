//! The defaults of every optional setting, in one place.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use crate::duration::{HumanDuration, NonZeroDuration};

pub(super) fn max_attempts() -> NonZeroU32 {
    NonZeroU32::new(8).unwrap_or(NonZeroU32::MIN)
}
pub(super) fn initial_delay() -> HumanDuration {
    HumanDuration(Duration::from_millis(500))
}
pub(super) fn max_delay() -> HumanDuration {
    HumanDuration(Duration::from_secs(60))
}
pub(super) fn timeout() -> NonZeroDuration {
    NonZeroDuration::from_secs(10)
}
pub(super) fn lookup_timeout() -> NonZeroDuration {
    NonZeroDuration::from_secs(5)
}
pub(super) fn consistency_window() -> HumanDuration {
    HumanDuration(Duration::from_secs(60))
}
pub(super) fn max_unconfirmed() -> NonZeroUsize {
    NonZeroUsize::new(256).unwrap_or(NonZeroUsize::MIN)
}
pub(super) fn yes() -> bool {
    true
}
pub(super) fn dedupe_window() -> NonZeroDuration {
    NonZeroDuration::new(crate::key::DEFAULT_DEDUPE_WINDOW).unwrap_or(NonZeroDuration::from_secs(1))
}
pub(super) fn one() -> NonZeroU32 {
    NonZeroU32::MIN
}
pub(super) fn approval_expiry() -> NonZeroDuration {
    NonZeroDuration::from_secs(86_400)
}
pub(super) fn breaker_failures() -> NonZeroU32 {
    NonZeroU32::new(5).unwrap_or(NonZeroU32::MIN)
}
pub(super) fn cool_down() -> NonZeroDuration {
    NonZeroDuration::from_secs(30)
}
