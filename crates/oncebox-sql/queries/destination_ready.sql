-- An operator enabled a destination: every queued delivery of its actions ($1) that waits —
-- parked while it was disabled, deferred while its breaker was open or its rate was spent, or
-- backing off before a retry — is made ready now, and waiting workers are woken on channel $2.
-- Rows parked behind their ordering lane's head (available_at infinity) stay parked: their turn
-- comes with the lane, and an intent awaiting approval waits for its people. Returns how many rows were made ready.
WITH ready AS (
    UPDATE oncebox.outbox o
    SET available_at = now()
    FROM oncebox.intents i
    WHERE o.phase = 'deliver' AND i.id = o.intent_id AND i.action = ANY ($1::text[])
      AND o.available_at > now() AND o.available_at < 'infinity'
      AND i.status <> 'awaiting_approval'
    RETURNING o.intent_id
), counted AS (
    SELECT count(*) AS n FROM ready
)
SELECT n FROM counted
WHERE n = 0 OR (SELECT pg_notify($2::text, 'deliver')) IS NOT NULL
