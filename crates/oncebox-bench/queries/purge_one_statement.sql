-- The purge as one statement, as `oncebox ops purge` ran before it purged in batches: every
-- terminal intent completed more than $1 seconds ago, with its attempts and outbox rows. The
-- scale benchmark times it in a transaction it rolls back, beside the batched purge.
WITH gone AS (
    DELETE FROM oncebox.intents
    WHERE completed_at IS NOT NULL AND completed_at < now() - make_interval(secs => $1)
      AND oncebox.is_terminal(status)
    RETURNING id
), outbox AS (
    DELETE FROM oncebox.outbox o USING gone WHERE o.intent_id = gone.id RETURNING o.intent_id
)
SELECT count(*) FROM gone
