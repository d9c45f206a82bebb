-- Messages sent (dead letters published, approval requests delivered or dropped), fenced:
-- delete their outbox rows of phase $4. $1 intent ids, $2 epochs, $3 worker.
DELETE FROM oncebox.outbox o
USING unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
WHERE o.intent_id = f.intent_id AND o.phase = $4 AND o.epoch = f.epoch AND o.lease_owner = $3
RETURNING o.intent_id
