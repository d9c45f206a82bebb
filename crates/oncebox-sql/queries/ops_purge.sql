-- Retention, one batch: removes up to $2 terminal intents completed more than $1 seconds ago
-- and not before $3 (where the previous batch stopped; null for the first), oldest first by
-- the intents_completed index, with their attempts (the trigger intents_purge_attempts; held
-- arguments and audit rows by cascade) and any leftover outbox rows. Never touches a
-- non-terminal intent. Returns how many it removed — fewer than $2: nothing older is left —
-- and the newest completion among them, where the next batch starts: starting from the oldest
-- again would walk the index entries of every row the batches before removed, not yet
-- vacuumed, each time. Batches keep each transaction short, however large the journal: no
-- statement timeout, no long-held snapshot stopping vacuum of the outbox meanwhile.
WITH doomed AS (
    SELECT id FROM oncebox.intents
    WHERE completed_at IS NOT NULL AND completed_at >= coalesce($3, '-infinity')
      AND completed_at < now() - make_interval(secs => $1)
      AND oncebox.is_terminal(status)
    ORDER BY completed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM oncebox.intents i USING doomed WHERE i.id = doomed.id
    RETURNING i.id, i.completed_at
), outbox AS (
    DELETE FROM oncebox.outbox o USING gone WHERE o.intent_id = gone.id RETURNING o.intent_id
)
SELECT count(*), max(completed_at) FROM gone
