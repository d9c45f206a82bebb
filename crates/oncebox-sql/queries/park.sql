-- Park leased deliver rows (fenced) of destination $5 while it is disabled: the lease is given
-- back without an attempt and each row waits $6 seconds, or until its intent's deadline when
-- that comes first (the deadline then expires it at its next claim). The destination's state is
-- read FOR SHARE, which orders this statement against an operator's enable (breaker_enable.sql
-- updates that row first, then destination_ready.sql makes the destination's rows ready): a row
-- parked before the enable is made ready by it, and a row parked after it sees the destination
-- enabled and is made ready at once instead. Returns the intents given back.
WITH state AS (
    SELECT state FROM oncebox.destination_state WHERE destination = $5 FOR SHARE
)
UPDATE oncebox.outbox o
SET lease_owner = NULL, lease_expires_at = NULL,
    available_at = CASE
        WHEN (SELECT state FROM state) = 'disabled'
            THEN least(now() + make_interval(secs => $6), coalesce(i.deadline, 'infinity'))
        ELSE now()
    END
FROM unnest($1::bigint[], $2::bigint[]) AS f(intent_id, epoch), oncebox.intents i
WHERE o.intent_id = f.intent_id AND o.phase = $4 AND o.epoch = f.epoch AND o.lease_owner = $3
  AND i.id = o.intent_id
RETURNING o.intent_id
