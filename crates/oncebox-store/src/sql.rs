//! Every statement the store runs, as text. The project keeps its SQL one way: each statement
//! lives in `queries/*.sql` beside this crate, opens with a header that says what it means and
//! how it is fenced, and is checked at run time (`query_as`) with every statement covered by a
//! test against a real Postgres — no database or `.sqlx/` cache is needed to build.
//!
//! The texts are public so that other languages write the very same rows: the Python binding
//! runs [`SUBMIT`] in the caller's own transaction instead of a copy of it.

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
    SUBMIT = "submit.sql";
    /// One intent by tenant and key.
    INTENT_BY_KEY = "intent_by_key.sql";
    /// Claim a batch of one phase (SKIP LOCKED, lease, epoch + 1).
    CLAIM = "claim.sql";
    /// Mark leased deliver rows dispatched (fenced).
    MARK_DISPATCHED = "mark_dispatched.sql";
    /// Move claimed reconcile rows' intents to reconciling (fenced).
    MARK_RECONCILING = "mark_reconciling.sql";
    /// Record a batch of outcomes (fenced).
    RECORD = "record.sql";
    /// Renew leases (fenced).
    RENEW = "renew.sql";
    /// Release leases at shutdown (fenced).
    RELEASE = "release.sql";
    /// Delete published dead-letter rows (fenced).
    NOTIFY_DONE = "notify_done.sql";
    /// Reschedule unpublished dead-letter rows (fenced).
    NOTIFY_LATER = "notify_later.sql";
    /// Register a worker as waiting for work.
    WAIT_REGISTER = "wait_register.sql";
    /// Deregister a waiting worker.
    WAIT_DEREGISTER = "wait_deregister.sql";
    /// The ready queue's depth and oldest age (gauges, stats).
    READY_QUEUE = "ready_queue.sql";
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
    /// Ops: after a restore, every queued delivery counts as possibly sent.
    OPS_RESTORED = "ops_restored.sql";
    /// Ops: retention purge.
    OPS_PURGE = "ops_purge.sql";
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
}
