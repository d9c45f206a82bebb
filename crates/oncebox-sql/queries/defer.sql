-- Defer leased rows (fenced) without an attempt, each for its own number of seconds ($5): their
-- destination's breaker is open, it is disabled, or it is over its rate. The lease is given
-- back and the row waits; nothing else changes (the intent's deadline still applies at its next
-- claim).
UPDATE oncebox.outbox o
SET lease_owner = NULL, lease_expires_at = NULL,
    available_at = now() + make_interval(secs => f.delay)
FROM unnest($1::bigint[], $2::bigint[], $5::float8[]) AS f(intent_id, epoch, delay)
WHERE o.intent_id = f.intent_id AND o.phase = $4 AND o.epoch = f.epoch AND o.lease_owner = $3
RETURNING o.intent_id
