//! HTTP status classification (docs/architecture.md, "Classify"), overridable per destination.

/// What an HTTP status says about the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusClass {
    /// 2xx: the effect happened.
    Success,
    /// The request definitely did not execute; retry with the same key.
    RetryBeforeExecution,
    /// The receiver refused for good.
    Permanent,
    /// The request may have executed.
    Unknown,
}

/// A destination's own lists, replacing the defaults for the statuses they name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusOverrides {
    /// Statuses to retry (definitely not executed).
    pub retry: Option<Vec<u16>>,
    /// Statuses that fail for good.
    pub permanent: Option<Vec<u16>>,
}

/// Classifies `status` for a destination that does (`honours_keys`) or does not honour
/// idempotency keys.
///
/// Defaults: 2xx success; 408, 429, 503 retry; 502 and 504 retry only when keys are honoured
/// (a gateway may have passed the request on), unknown otherwise; a 3xx permanent (redirects
/// are never followed: the effect did not happen where it was asked for); every other 4xx
/// permanent (the receiver answered that it refused; 400, 401, 403, 404, 409, 422 are the
/// common ones); every other status (500, 501, 505…, 1xx) unknown. `overrides` win over the
/// defaults.
pub fn classify_status(
    status: u16,
    honours_keys: bool,
    overrides: &StatusOverrides,
) -> StatusClass {
    if (200..300).contains(&status) {
        return StatusClass::Success;
    }
    if overrides
        .permanent
        .as_ref()
        .is_some_and(|l| l.contains(&status))
    {
        return StatusClass::Permanent;
    }
    if overrides
        .retry
        .as_ref()
        .is_some_and(|l| l.contains(&status))
    {
        return StatusClass::RetryBeforeExecution;
    }
    match status {
        408 | 429 | 503 => StatusClass::RetryBeforeExecution,
        502 | 504 if honours_keys => StatusClass::RetryBeforeExecution,
        300..=499 => StatusClass::Permanent,
        _ => StatusClass::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use StatusClass::*;

    #[test]
    fn defaults_follow_design() {
        let none = StatusOverrides::default();
        for (status, keys, want) in [
            (200, false, Success),
            (201, false, Success),
            (204, true, Success),
            (408, false, RetryBeforeExecution),
            (429, false, RetryBeforeExecution),
            (503, false, RetryBeforeExecution),
            (502, true, RetryBeforeExecution),
            (504, true, RetryBeforeExecution),
            (502, false, Unknown),
            (504, false, Unknown),
            (400, true, Permanent),
            (401, true, Permanent),
            (403, true, Permanent),
            (404, true, Permanent),
            (409, true, Permanent),
            (422, true, Permanent),
            (413, true, Permanent),
            (500, true, Unknown),
            (501, true, Unknown),
            (301, false, Permanent),
            (302, true, Permanent),
            (307, false, Permanent),
            (308, true, Permanent),
            (101, true, Unknown),
        ] {
            assert_eq!(
                classify_status(status, keys, &none),
                want,
                "{status} keys={keys}"
            );
        }
    }

    #[test]
    fn overrides_win() {
        let o = StatusOverrides {
            retry: Some(vec![500, 409]),
            permanent: Some(vec![503]),
        };
        assert_eq!(classify_status(500, false, &o), RetryBeforeExecution);
        assert_eq!(classify_status(409, false, &o), RetryBeforeExecution);
        assert_eq!(classify_status(503, false, &o), Permanent);
        assert_eq!(
            classify_status(200, false, &o),
            Success,
            "2xx cannot be overridden"
        );
        assert_eq!(
            classify_status(429, false, &o),
            RetryBeforeExecution,
            "others keep defaults"
        );
    }
}
