-- Ops: one row of the retry report for an operator's decision on intent $1 (attempt $2, by $3,
-- kind $4, detail $5); an operator's row has no outbox phase. Waiters (GET ?wait=) on channel $6
-- re-read their intents when the transaction commits.
WITH notified AS (
    SELECT pg_notify($6, '')
)
INSERT INTO oncebox.attempts
    (intent_id, attempt, epoch, worker, phase, started_at, finished_at, outcome, detail)
SELECT $1, $2, 0, $3, NULL, now(), now(), $4, $5 FROM notified
