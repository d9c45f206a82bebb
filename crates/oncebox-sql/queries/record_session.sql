-- A completer's own session for recording successes (record_succeeded.sql only): its plan is
-- cached, so each record skips its planning, and it is the same plan whatever the statistics
-- say.
-- 1. plan_cache_mode = force_generic_plan: the pool's sessions plan each batch for its real
--    size, which took 0.5-1 ms of a 300-outcome record (EXPLAIN (ANALYZE, SUMMARY): 0.17 ms
--    with the cached plan).
-- 2. enable_nestloop = off: a generic plan does not know the batch's size and takes it for 10
--    outcomes; it then joins the outcomes to the outbox rows they fence in a nested loop, which
--    compares every outcome with every row: 32 ms instead of 1.5 ms for 300. Without nested
--    loops it hashes them, as a custom plan does.
-- 3. enable_seqscan = off: a plan made while the statistics say the tables are empty reads
--    the whole outbox and journal (sequential scans) for each record; this statement reads
--    every row it writes by primary key, and only that plan is left. (The claim's plan, which
--    has no such single answer, is made again every second instead: claim_session.sql.)
-- Synchronous commit stays on: an outcome is durable when the record returns.
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('enable_nestloop', 'off', false),
       set_config('enable_seqscan', 'off', false)
