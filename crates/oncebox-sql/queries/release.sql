-- Release leases (fenced) at shutdown, so another worker takes the rows at once instead of
-- after the lease expires: the lease is made to expire now. The holder is kept, as a crashed
-- worker's is, and so is dispatched_at: a released call may have been sent, its outcome is
-- unknown, and a person must not be able to cancel it as never dispatched.
UPDATE oncebox.outbox o
SET lease_expires_at = now()
FROM unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
WHERE o.intent_id = f.intent_id AND o.phase = $4 AND o.epoch = f.epoch AND o.lease_owner = $3
RETURNING o.intent_id
