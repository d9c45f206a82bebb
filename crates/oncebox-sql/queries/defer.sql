-- Defer leased rows (fenced) for $5 seconds without an attempt: their destination's breaker is
-- open or it is disabled. The lease is given back and the row waits; nothing else changes (the
-- intent's deadline still applies at its next claim).
UPDATE oncebox.outbox o
SET lease_owner = NULL, lease_expires_at = NULL,
    available_at = now() + make_interval(secs => $5)
FROM unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
WHERE o.intent_id = f.intent_id AND o.phase = $4 AND o.epoch = f.epoch AND o.lease_owner = $3
RETURNING o.intent_id
