-- Dead letters published (fenced): delete their notify rows. $1 intent ids, $2 epochs, $3 worker.
DELETE FROM oncebox.outbox o
USING unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
WHERE o.intent_id = f.intent_id AND o.phase = 'notify' AND o.epoch = f.epoch AND o.lease_owner = $3
RETURNING o.intent_id
