-- Purge: the attempts of purged intents are found through attempts_by_intent. The trigger of
-- migration 0013 joined the purged rows' transition table to `attempts`, which the planner ran
-- as a hash join over a sequential scan of the whole table: a purge batch of 10,000 intents
-- read every attempt ever kept (0.5 s a batch on a 1,000,000-intent journal, 2 s on
-- 10,000,000). As `= ANY` of an array, the same delete is an index scan (20 ms).
CREATE OR REPLACE FUNCTION oncebox.intents_purge_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM oncebox.attempts WHERE intent_id = ANY (ARRAY(SELECT id FROM gone));
    RETURN NULL;
END
$$;
