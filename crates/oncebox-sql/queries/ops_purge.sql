-- Retention: remove terminal intents completed more than $1 seconds ago, with their attempts
-- (the trigger intents_purge_attempts; held arguments and audit rows by cascade) and any
-- leftover outbox rows. Never touches a non-terminal intent.
WITH gone AS (
    DELETE FROM oncebox.intents
    WHERE completed_at IS NOT NULL AND completed_at < now() - make_interval(secs => $1)
      AND oncebox.is_terminal(status)
    RETURNING id
), outbox AS (
    DELETE FROM oncebox.outbox o USING gone WHERE o.intent_id = gone.id RETURNING o.intent_id
)
SELECT count(*) FROM gone
