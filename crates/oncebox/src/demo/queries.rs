//! The demo's own statements (its business tables and its counts), kept in `queries/demo_*.sql`
//! as the store keeps its own.

pub(super) const TABLES: &str = include_str!("../../queries/demo_tables.sql");
pub(super) const ORDER: &str = include_str!("../../queries/demo_order.sql");
pub(super) const BACKEND_PID: &str = include_str!("../../queries/demo_backend_pid.sql");
pub(super) const TERMINATE: &str = include_str!("../../queries/demo_terminate.sql");
pub(super) const OPEN: &str = include_str!("../../queries/demo_open.sql");
pub(super) const PUBLISHED: &str = include_str!("../../queries/demo_published.sql");
pub(super) const APPLIED: &str = include_str!("../../queries/demo_applied.sql");
pub(super) const APPLIED_PER_KEY: &str = include_str!("../../queries/demo_applied_per_key.sql");
pub(super) const EVENT: &str = include_str!("../../queries/demo_event.sql");
pub(super) const SUMMARY: &str = include_str!("../../queries/demo_summary.sql");
pub(super) const BY_STATUS: &str = include_str!("../../queries/demo_by_status.sql");
pub(super) const SUCCEEDED_KEYS: &str = include_str!("../../queries/demo_succeeded_keys.sql");
