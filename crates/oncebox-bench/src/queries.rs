//! The benchmark's own statements, kept in `queries/*.sql` as the store keeps its own.

/// The raw intake, with the key bound.
pub(crate) const RAW_INTAKE: &str = include_str!("../queries/raw_intake.sql");
/// Empty every table between measurements.
pub(crate) const RESET: &str = include_str!("../queries/reset.sql");
/// A backlog of `$1` intents over `$2` tenants.
pub(crate) const BACKLOG: &str = include_str!("../queries/backlog.sql");
/// This session's table statistics reported as soon as it is idle.
pub(crate) const FLUSH_STATISTICS: &str = include_str!("../queries/flush_statistics.sql");
/// The server's autovacuum settings.
pub(crate) const AUTOVACUUM_SETTINGS: &str = include_str!("../queries/autovacuum_settings.sql");
/// Tenants with rows in the outbox.
pub(crate) const READY_TENANTS: &str = include_str!("../queries/ready_tenants.sql");
/// Statistics and a checkpoint after a fill.
pub(crate) const SETTLE: &str = include_str!("../queries/settle.sql");
/// Outbox rows left.
pub(crate) const OUTBOX_LEFT: &str = include_str!("../queries/outbox_left.sql");
/// Intents that succeeded.
pub(crate) const SUCCEEDED: &str = include_str!("../queries/succeeded.sql");
/// Rows left in the baseline's outbox.
pub(crate) const BASELINE_LEFT: &str = include_str!("../queries/baseline_left.sql");
/// Empty the journal between drains (the signing benchmark).
pub(crate) const RESET_JOURNAL: &str = include_str!("../queries/reset_journal.sql");
/// The server's WAL position, as text.
pub(crate) const WAL_POSITION: &str = include_str!("../queries/wal_position.sql");
/// WAL bytes written since the position `$1`.
pub(crate) const WAL_SINCE: &str = include_str!("../queries/wal_since.sql");
/// Workers registered as waiting.
pub(crate) const WAITING_WORKERS: &str = include_str!("../queries/waiting_workers.sql");
/// Vacuum between two latency points.
pub(crate) const BETWEEN_POINTS: &str = include_str!("../queries/between_points.sql");
/// Rows written so far per oncebox table.
pub(crate) const TABLE_WRITES: &str = include_str!("../queries/table_writes.sql");
/// A journal of `$1` terminal intents kept for retention.
pub(crate) const JOURNAL: &str = include_str!("../queries/journal.sql");
/// `$1` idle ordering lanes with a past.
pub(crate) const IDLE_LANES: &str = include_str!("../queries/idle_lanes.sql");
/// The purge as one statement (what the batched purge replaced), for comparison.
pub(crate) const PURGE_ONE_STATEMENT: &str = include_str!("../queries/purge_one_statement.sql");
/// The lanes and destinations one size of the scale benchmark spread its intents over.
pub(crate) const SCALE_SPREAD: &str = include_str!("../queries/scale_spread.sql");
