-- The outbox is a queue table: each row is inserted, updated on claim and renewal, and deleted
-- on completion, so between vacuums it is mostly dead tuples that FOR UPDATE SKIP LOCKED scans
-- step over. Vacuum it by row count rather than by fraction of a table that is always small,
-- and without cost-based throttling. (README, "Running in production".)
ALTER TABLE oncebox.outbox SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000
);
