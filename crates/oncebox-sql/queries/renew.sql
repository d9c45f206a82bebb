-- Renew the leases of deliveries still in progress (fenced): returns the rows still held; a
-- row missing from the answer was taken over, and its call must be abandoned.
UPDATE oncebox.outbox o
SET lease_expires_at = now() + make_interval(secs => $4)
FROM unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
WHERE o.intent_id = f.intent_id AND o.phase = $5 AND o.epoch = f.epoch AND o.lease_owner = $3
RETURNING o.intent_id
