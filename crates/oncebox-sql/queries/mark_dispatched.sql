-- Dispatch (fenced, batched): before calling a destination that does not honour keys, record
-- that the request may leave. Rows whose lease moved on (epoch or owner changed) are not
-- returned: their worker must not call. $1 intent ids, $2 epochs, $3 worker.
WITH d AS (
    UPDATE oncebox.outbox o
    SET dispatched_at = now(), attempt = o.attempt + 1
    FROM unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch)
    WHERE o.intent_id = f.intent_id AND o.phase = 'deliver'
      AND o.epoch = f.epoch AND o.lease_owner = $3
    RETURNING o.intent_id, o.attempt
)
UPDATE oncebox.intents i
SET status = 'in_flight', attempt_count = d.attempt, updated_at = now()
FROM d
WHERE i.id = d.intent_id
RETURNING i.id
