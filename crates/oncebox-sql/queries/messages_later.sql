-- Messages not sent (broker down, nack, no confirm; a destination that did not take an approval
-- request), fenced: release their rows of phase $5 to be tried again after $4 seconds.
UPDATE oncebox.outbox o
SET lease_owner = NULL, lease_expires_at = NULL, attempt = o.attempt + 1,
    available_at = now() + make_interval(secs => $4)
FROM unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
WHERE o.intent_id = f.intent_id AND o.phase = $5 AND o.epoch = f.epoch AND o.lease_owner = $3
RETURNING o.intent_id
