-- Rows written so far in oncebox's tables (cumulative statistics, flushed by each backend within
-- about a second of its transactions, or ten seconds when idle): inserted, updated (of which
-- HOT), deleted, per table.
SELECT relname::text AS relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
FROM pg_stat_user_tables WHERE schemaname = 'oncebox' ORDER BY relname
