-- Reconcile (fenced, batched): before looking an unknown outcome up, show it as reconciling.
-- Returns the intents marked; a row whose lease moved on is not looked up by this worker.
UPDATE oncebox.intents i
SET status = 'reconciling', updated_at = now()
FROM oncebox.outbox o, unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
WHERE o.intent_id = f.intent_id AND o.phase = 'reconcile' AND o.epoch = f.epoch
  AND o.lease_owner = $3 AND i.id = o.intent_id AND i.status IN ('unknown', 'reconciling')
RETURNING i.id
