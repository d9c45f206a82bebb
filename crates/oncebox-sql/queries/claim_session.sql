-- The delivery claimer's own session (one connection, out of the pool, running claims only):
-- 1. plan_cache_mode = force_generic_plan: the claim's plan is cached. The pool's sessions
--    force custom plans, which the batch statements need, but planning the claim's recursive
--    skip scan took 0.3-0.6 ms of every claim (measured with EXPLAIN: custom 1.0 ms, generic
--    0.4 ms on 2,000 ready rows). A cached plan is made for the tables as they were (made on
--    an empty outbox, it scanned and sorted the whole outbox on every claim), so the session
--    plans again once its plan is a second old (ClaimSession in oncebox-store).
-- 2. synchronous_commit = off: a claim returns without waiting for its WAL flush (about 1 ms
--    on the development machine's disk, on the path of every delivery). Nothing is lost that
--    fencing needs: WAL is flushed in order, so any later durable commit - the dispatch mark
--    written before calling a destination that does not honour keys, an outcome recorded -
--    makes the claim durable first. A claim lost in a server crash (nothing durable after it)
--    leaves its row as it was before: unleased at its old epoch. The worker's record for it is
--    then refused (fenced by lease owner and epoch) unless this same worker claims it again,
--    in which case that record is the true outcome of a call carrying the intent's own key, to a
--    destination that honours keys; the row is delivered again with the same key otherwise.
SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
       set_config('synchronous_commit', 'off', false)
