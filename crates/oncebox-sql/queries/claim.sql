-- Claim: lease up to $3 outbox rows of phase $1 for worker $2, for $4 seconds, in one
-- statement committed at once. Ready rows are taken in available_at order; rows whose lease
-- expired (a crashed or stalled worker) are taken back. Every claim bumps the fencing epoch.
-- Returns what the worker needs of each intent, so a delivery needs no further read.
-- `lease_taken_over` marks rows taken from another worker; `dispatched_at` set means an
-- earlier attempt may have reached the destination: its outcome is unknown.
WITH ready AS (
    SELECT intent_id FROM oncebox.outbox
    WHERE phase = $1 AND lease_owner IS NULL AND available_at <= now()
    ORDER BY available_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), expired AS (
    SELECT intent_id FROM oncebox.outbox
    WHERE lease_owner IS NOT NULL AND lease_expires_at < now() AND phase = $1
    ORDER BY lease_expires_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT intent_id FROM expired
    UNION ALL
    SELECT intent_id FROM ready
    LIMIT $3
)
UPDATE oncebox.outbox o
SET lease_owner = $2,
    lease_expires_at = now() + make_interval(secs => $4),
    epoch = o.epoch + 1
FROM oncebox.intents i
WHERE o.phase = $1 AND o.intent_id = ANY (ARRAY(SELECT intent_id FROM picked))
  AND i.id = o.intent_id
RETURNING o.intent_id, o.phase, o.epoch, o.attempt, o.budget_from, o.dispatched_at, o.arguments,
          o.lease_expires_at, o.intent_id IN (SELECT intent_id FROM expired) AS lease_taken_over,
          i.tenant_id, i.idempotency_key, i.action, i.request_hash, i.payload, i.status,
          i.external_reference, i.last_error, i.attempt_count, i.created_at, i.updated_at,
          i.deadline, i.deadline IS NOT NULL AND i.deadline <= now() AS deadline_passed
