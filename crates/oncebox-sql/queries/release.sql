-- Release leases (fenced) at shutdown, so another worker takes the rows at once instead of
-- after the lease expires. dispatched_at is kept: a released in-flight call is still unknown.
UPDATE oncebox.outbox o
SET lease_owner = NULL, lease_expires_at = NULL
FROM unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
WHERE o.intent_id = f.intent_id AND o.phase = $4 AND o.epoch = f.epoch AND o.lease_owner = $3
RETURNING o.intent_id
