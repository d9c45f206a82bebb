//! Every statement oncebox's Postgres store runs, as text — one source for the Rust store
//! (`oncebox_store::sql`) and the Python binding, so both languages write the very same rows.
//!
//! The project keeps its SQL one way: each statement lives in `queries/*.sql` beside this crate,
//! opens with a header that says what it means and how it is fenced, and is checked at run time
//! (`query_as`) with every statement covered by a test against a real Postgres — no database
//! or `.sqlx/` cache is needed to build.
//!
//! Statements use Postgres's own placeholders (`$1`, `$2`…). Python drivers take `%(name)s`
//! instead; [`pyformat`] spells a statement that way so that the driver, which numbers named
//! placeholders by first appearance, sends the server this very text again.

/// The NOTIFY channel that wakes idle workers when outbox rows appear. The one definition:
/// statements take it as a parameter.
pub const OUTBOX_CHANNEL: &str = "oncebox_outbox";

/// The NOTIFY channel that tells waiters (`GET /v1/intents/{key}?wait=`) that intents settled.
/// The one definition: statements take it as a parameter.
pub const DONE_CHANNEL: &str = "oncebox_intent_done";

/// The parameters of [`SUBMIT`] by name, in their order (`$1`, `$2`, …): the names every
/// binding fills them by (the Rust store, and the Python and TypeScript packages, which read
/// this list from their native modules), so that an intent field added to the statement is
/// added here once. `delivery_arguments` holds the original arguments only when redaction
/// changed them; `approvals` and `approval_window` are the action's approval policy (null for
/// none); `submitted_by` the principal (null: the database role); `notify` whether to wake a
/// waiting worker on `channel`.
pub const SUBMIT_PARAMS: [&str; 15] = [
    "tenant",
    "key",
    "action",
    "request_hash",
    "payload",
    "business_ref",
    "run_id",
    "step",
    "deadline",
    "delivery_arguments",
    "approvals",
    "approval_window",
    "submitted_by",
    "notify",
    "channel",
];

/// The parameters of [`SUBMIT_ORDERED`] by name, in their order: the tenant, the lane (the
/// ordering key, the destination and whether its lanes skip a failed head), then the rest of
/// [`SUBMIT_PARAMS`] in theirs.
pub const SUBMIT_ORDERED_PARAMS: [&str; 18] = ordered_params();

/// The lane's parameters, which [`SUBMIT_ORDERED`] takes after the tenant.
const LANE_PARAMS: [&str; 3] = ["ordering_key", "destination", "skip_failed"];

const fn ordered_params() -> [&'static str; 18] {
    let mut out = [""; 18];
    out[0] = SUBMIT_PARAMS[0];
    let mut i = 0;
    while i < LANE_PARAMS.len() {
        out[1 + i] = LANE_PARAMS[i];
        i += 1;
    }
    let mut i = 1;
    while i < SUBMIT_PARAMS.len() {
        out[LANE_PARAMS.len() + i] = SUBMIT_PARAMS[i];
        i += 1;
    }
    out
}

macro_rules! statements {
    ($($(#[$doc:meta])* $name:ident = $file:literal;)*) => {
        $(
            $(#[$doc])*
            pub const $name: &str = include_str!(concat!("../queries/", $file));
        )*

        /// Every statement, with the file it comes from (for tests that plan or check them all).
        pub const ALL: &[(&str, &str)] = &[$(($file, $name)),*];
    };
}

statements! {
    /// Submit: journal row + deliver row in one statement (11 parameters and the channel).
    /// Also run by the Python binding, spelled by [`pyformat`].
    SUBMIT = "submit.sql";
    /// Submit with an ordering key: the intent joins its lane, parked behind the lane's head.
    /// Also run by the Python binding.
    SUBMIT_ORDERED = "submit_ordered.sql";
    /// One intent by tenant and key.
    INTENT_BY_KEY = "intent_by_key.sql";
    /// Claim a batch of one phase (SKIP LOCKED, lease, epoch + 1).
    CLAIM = "claim.sql";
    /// The claimer's own session: generic plans, commits without waiting for the WAL flush.
    CLAIM_SESSION = "claim_session.sql";
    /// Whether a phase has rows a claim could take, now or later.
    PHASE_WAITING = "phase_waiting.sql";
    /// Mark leased deliver rows dispatched (fenced).
    MARK_DISPATCHED = "mark_dispatched.sql";
    /// Move claimed reconcile rows' intents to reconciling (fenced).
    MARK_RECONCILING = "mark_reconciling.sql";
    /// Record a batch of outcomes (fenced).
    RECORD = "record.sql";
    /// Record a batch of first-time successes of deliveries (fenced): record.sql's common case.
    RECORD_SUCCEEDED = "record_succeeded.sql";
    /// A completer's own session for record_succeeded.sql: one cached plan, by primary keys.
    RECORD_SESSION = "record_session.sql";
    /// Renew leases (fenced).
    RENEW = "renew.sql";
    /// Release leases at shutdown (fenced).
    RELEASE = "release.sql";
    /// Delete the rows of messages sent: dead letters, approval requests (fenced).
    MESSAGES_SENT = "messages_sent.sql";
    /// Reschedule the rows of messages not sent (fenced).
    MESSAGES_LATER = "messages_later.sql";
    /// Register a worker as waiting for work.
    WAIT_REGISTER = "wait_register.sql";
    /// Deregister a waiting worker.
    WAIT_DEREGISTER = "wait_deregister.sql";
    /// The ready queue's depth and oldest age (gauges, stats).
    READY_QUEUE = "ready_queue.sql";
    /// Gauges: intents waiting per status, and unpublished dead letters.
    WAITING_GAUGES = "waiting_gauges.sql";
    /// Circuit breakers: every destination's state.
    BREAKER_STATES = "breaker_states.sql";
    /// Circuit breaker: one more failure.
    BREAKER_FAILURE = "breaker_failure.sql";
    /// Circuit breaker: an answer.
    BREAKER_SUCCESS = "breaker_success.sql";
    /// Circuit breaker: claim the probe.
    BREAKER_PROBE = "breaker_probe.sql";
    /// Circuit breaker: disable (410, operator).
    BREAKER_DISABLE = "breaker_disable.sql";
    /// Circuit breaker: enable (operator).
    BREAKER_ENABLE = "breaker_enable.sql";
    /// Rate limits: take tokens of several destinations.
    RATE_TAKE = "rate_take.sql";
    /// Rate limit: pause after a Retry-After.
    RATE_SLOW = "rate_slow.sql";
    /// Defer leased rows without an attempt.
    DEFER = "defer.sql";
    /// Park leased rows of a disabled destination without an attempt.
    PARK = "park.sql";
    /// An enabled destination's waiting deliveries made ready.
    DESTINATION_READY = "destination_ready.sql";
    /// Ordering lanes: the busy ones, blocked first.
    LANES_LIST = "lanes_list.sql";
    /// Ordering lanes: the repair sweep.
    LANES_REPAIR = "lanes_repair.sql";
    /// Ordering lanes: how many are blocked (gauge).
    LANES_BLOCKED = "lanes_blocked.sql";
    /// Ordering lanes: an operator skips a blocked head.
    LANE_SKIP = "lane_skip.sql";
    /// Workers seen: this one is alive.
    WORKER_SEEN = "worker_seen.sql";
    /// Workers seen, most recent first.
    WORKERS_LIST = "workers_list.sql";
    /// Console: a session at login.
    SESSION_CREATE = "session_create.sql";
    /// Console: the caller behind a session.
    SESSION_FIND = "session_find.sql";
    /// Console: logout.
    SESSION_END = "session_end.sql";
    /// Console: a login form served.
    LOGIN_CREATE = "login_create.sql";
    /// Console: a login form taken by its login.
    LOGIN_TAKE = "login_take.sql";
    /// Console: a tenant's intents per action and status.
    CONSOLE_COUNTS = "console_counts.sql";
    /// Console: completions per minute over the last hour.
    CONSOLE_COMPLETED = "console_completed.sql";
    /// Console: a tenant's ready deliveries.
    CONSOLE_READY = "console_ready.sql";
    /// Console: intents that need a person.
    CONSOLE_ATTENTION = "console_attention.sql";
    /// Console: search by key or business reference.
    CONSOLE_SEARCH = "console_search.sql";
    /// Ops: list intents.
    OPS_LIST = "ops_list.sql";
    /// Ops: find an intent by key or id.
    OPS_FIND = "ops_find.sql";
    /// Ops: lock an intent for an operator's change.
    OPS_LOCK = "ops_lock.sql";
    /// Ops: one retry-report row for an operator's decision.
    OPS_REPORT = "ops_report.sql";
    /// Ops: the retry report of an intent.
    OPS_HISTORY = "ops_history.sql";
    /// Ops: retry (back to pending, same key).
    OPS_RETRY = "ops_retry.sql";
    /// Ops: can a retry re-send what was sent (redacted, originals held)?
    OPS_RETRY_CHECK = "ops_retry_check.sql";
    /// Ops: resolve (succeeded or failed by a person).
    OPS_RESOLVE = "ops_resolve.sql";
    /// Ops: may this intent still be cancelled?
    OPS_CANCEL_CHECK = "ops_cancel_check.sql";
    /// Ops: cancel.
    OPS_CANCEL = "ops_cancel.sql";
    /// Console: intents awaiting approval, with their approvals so far.
    CONSOLE_APPROVALS = "console_approvals.sql";
    /// Console: how many intents await approval, and the first window to close.
    APPROVALS_SUMMARY = "approvals_summary.sql";
    /// Approvals: the arguments an intent will be delivered with, for its approvers.
    APPROVAL_ORIGINALS = "approval_originals.sql";
    /// Ops: may this intent still be approved or rejected, and by whom?
    OPS_APPROVAL_CHECK = "ops_approval_check.sql";
    /// Ops: one approval; the last one needed releases the intent.
    OPS_APPROVE = "ops_approve.sql";
    /// Ops: reject an intent awaiting approval.
    OPS_REJECT = "ops_reject.sql";
    /// Worker: what the approval requests of some intents state.
    APPROVAL_REQUESTS = "approval_requests.sql";
    /// Ops: after a restore, every queued delivery counts as possibly sent.
    OPS_RESTORED = "ops_restored.sql";
    /// Ops: retention purge.
    OPS_PURGE = "ops_purge.sql";
    /// Audit: record an operator decision.
    AUDIT_INSERT = "audit_insert.sql";
    /// Audit: list decisions, newest first.
    AUDIT_LIST = "audit_list.sql";
    /// Ops: intents per status.
    OPS_STATS_STATUS = "ops_stats_status.sql";
    /// Ops: outbox rows per phase.
    OPS_STATS_OUTBOX = "ops_stats_outbox.sql";
    /// Tokens: create.
    TOKEN_CREATE = "token_create.sql";
    /// Tokens: revoke.
    TOKEN_REVOKE = "token_revoke.sql";
    /// Tokens: list (never the secret).
    TOKEN_LIST = "token_list.sql";
    /// Tokens: authenticate.
    TOKEN_AUTHENTICATE = "token_authenticate.sql";
    /// Readiness: the database answers.
    PING = "ping.sql";
    /// Readiness: migrations applied, by oncebox's own history.
    MIGRATIONS_APPLIED = "migrations_applied.sql";
    /// Start-up: the newest migration applied (refuse a schema newer than the binary).
    MIGRATIONS_NEWEST = "migrations_newest.sql";
    /// Migrate: oncebox's own history table (two statements, simple protocol).
    MIGRATIONS_HISTORY = "migrations_history.sql";
    /// Migrate: is there a shared `_sqlx_migrations` outside the oncebox schema?
    MIGRATIONS_LEGACY = "migrations_legacy.sql";
    /// Migrate: move oncebox's rows out of the shared history.
    MIGRATIONS_ADOPT = "migrations_adopt.sql";
    /// Migrate: one process at a time moves the shared history.
    MIGRATIONS_LOCK = "migrations_lock.sql";
}

/// A statement that [`pyformat`] cannot spell for a Python driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PyformatError {
    /// A `$n` inside a comment or a string literal: the driver would number it as a parameter.
    #[error("byte {at}: a placeholder inside a comment or string literal")]
    PlaceholderInText {
        /// Byte offset of the `$`.
        at: usize,
    },
    /// Placeholders first appear out of order (`$2` before `$1`): the driver numbers them by
    /// first appearance, so the server would receive other numbers.
    #[error("byte {at}: ${found} appears first where ${expected} was expected")]
    OutOfOrder {
        /// Byte offset of the `$`.
        at: usize,
        /// The number found.
        found: usize,
        /// The number the driver would give it.
        expected: usize,
    },
}

/// `statement` with each `$n` written `%(pn)s` and each `%` doubled: the form psycopg takes
/// with a mapping `{"p1": …, "p2": …}`. Psycopg numbers named placeholders by first appearance
/// (a repeated name keeps its number) and undoubles `%%`, so it sends the server exactly
/// `statement` — which is why placeholders must first appear in order and never inside a
/// comment or string literal (the driver does not read SQL, and would number those too).
///
/// # Errors
/// [`PyformatError`] for a statement that would not come back unchanged.
pub fn pyformat(statement: &str) -> Result<String, PyformatError> {
    let bytes = statement.as_bytes();
    let mut out = String::with_capacity(statement.len() + 32);
    let mut seen = 0usize;
    let mut i = 0;
    let mut in_comment = false;
    let mut in_string = false;
    while i < bytes.len() {
        let c = bytes[i];
        let digits = bytes[i + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if c == b'$' && digits > 0 {
            if in_comment || in_string {
                return Err(PyformatError::PlaceholderInText { at: i });
            }
            let text = &statement[i + 1..i + 1 + digits];
            let n: usize = text.parse().unwrap_or(usize::MAX);
            if n > seen + 1 {
                return Err(PyformatError::OutOfOrder {
                    at: i,
                    found: n,
                    expected: seen + 1,
                });
            }
            seen = seen.max(n);
            out.push_str("%(p");
            out.push_str(text);
            out.push_str(")s");
            i += 1 + digits;
            continue;
        }
        match c {
            b'\n' => in_comment = false,
            b'-' if !in_string && bytes.get(i + 1) == Some(&b'-') => in_comment = true,
            b'\'' if !in_comment => in_string = !in_string,
            b'%' => out.push('%'),
            _ => {}
        }
        // Copy the whole character (statements may hold non-ASCII in comments).
        let len = statement[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&statement[i..i + len]);
        i += len;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The highest `$n` of a statement: how many parameters it takes.
    fn parameters(statement: &str) -> usize {
        let bytes = statement.as_bytes();
        (0..bytes.len())
            .filter(|&i| bytes[i] == b'$')
            .filter_map(|i| {
                let digits: String = statement[i + 1..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                digits.parse::<usize>().ok()
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn the_submit_parameter_lists_name_every_placeholder() {
        assert_eq!(parameters(SUBMIT), SUBMIT_PARAMS.len());
        assert_eq!(parameters(SUBMIT_ORDERED), SUBMIT_ORDERED_PARAMS.len());
        assert_eq!(parameters("SELECT $1, $12, $3"), 12);
        let (lane, rest) = SUBMIT_ORDERED_PARAMS.split_at(4);
        assert_eq!(
            lane,
            ["tenant", "ordering_key", "destination", "skip_failed"]
        );
        assert_eq!(rest, &SUBMIT_PARAMS[1..]);
    }

    #[test]
    fn placeholders_become_names_and_percent_signs_double() {
        assert_eq!(
            pyformat("SELECT $1, $2, $1 || '%' -- 100%\n").as_deref(),
            Ok("SELECT %(p1)s, %(p2)s, %(p1)s || '%%' -- 100%%\n")
        );
        assert_eq!(
            pyformat("SELECT $10"),
            Err(PyformatError::OutOfOrder {
                at: 7,
                found: 10,
                expected: 1
            })
        );
    }

    #[test]
    fn placeholders_in_comments_or_strings_are_refused() {
        assert_eq!(
            pyformat("-- takes $1\nSELECT $1"),
            Err(PyformatError::PlaceholderInText { at: 9 })
        );
        assert_eq!(
            pyformat("SELECT '$1', $1"),
            Err(PyformatError::PlaceholderInText { at: 8 })
        );
        assert_eq!(
            pyformat("SELECT 1 -- $ alone"),
            Ok("SELECT 1 -- $ alone".into())
        );
    }

    #[test]
    fn the_statements_python_runs_spell_as_pyformat() {
        for statement in [SUBMIT, SUBMIT_ORDERED, INTENT_BY_KEY] {
            let spelled = pyformat(statement).expect("in order, none in comments");
            assert!(!spelled.contains('$'), "{spelled}");
        }
    }
}
