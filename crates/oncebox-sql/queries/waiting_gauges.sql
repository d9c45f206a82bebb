-- Gauges: per status waiting for reconciliation or a person (unknown, reconciling,
-- needs_review), how many intents and the age in seconds of the one waiting longest (since its
-- last change), over the intents_waiting index; then the intents awaiting approval (when there
-- are some) and the age of the oldest since it was submitted, over the intents_awaiting_approval
-- index; then the dead letters not yet published (the
-- outbox's notify rows) with the age of the oldest since its intent entered a dead-letter status.
SELECT status::text AS gauge, count(*) AS n,
       extract(epoch FROM now() - min(updated_at))::float8 AS oldest_seconds
FROM oncebox.intents
WHERE status IN ('unknown', 'reconciling', 'needs_review')
GROUP BY status
UNION ALL
SELECT 'awaiting_approval', count(*), extract(epoch FROM now() - min(created_at))::float8
FROM oncebox.intents
WHERE status = 'awaiting_approval'
HAVING count(*) > 0
UNION ALL
SELECT 'dead_letter', count(*),
       coalesce(extract(epoch FROM now() - min(i.updated_at))::float8, 0)
FROM oncebox.outbox o JOIN oncebox.intents i ON i.id = o.intent_id
WHERE o.phase = 'notify'
