-- Claim: lease up to $3 outbox rows of phase $1 for worker $2, for $4 seconds, in one
-- statement committed at once, fairly between tenants (migration 0012): the tenants with
-- unleased rows are found by a skip scan of the ready index (one descent each); of those with
-- ready rows, the $3 whose oldest ready row is oldest each get an equal share of the batch,
-- their oldest rows first, taken round by round (every tenant's first row, then every second
-- row…). One tenant alone gets the whole batch in available_at order. Rows whose lease expired
-- (a crashed or stalled worker) are taken back first. Every claim bumps the fencing epoch.
-- Returns what the worker needs of each intent, so a delivery needs no further read.
-- `lease_taken_over` marks rows taken from another worker; `dispatched_at` set means an
-- earlier attempt may have reached the destination: its outcome is unknown.
WITH RECURSIVE tenants AS (
    -- Each tenant with unleased rows and its oldest one: one descent of the ready index per
    -- tenant. Selecting intent_id (not in the index) makes these plain index scans, which mark
    -- the entries of rows claimed or deleted since as dead for every later scan.
    (SELECT o.tenant_id, o.available_at, o.intent_id FROM oncebox.outbox o
     WHERE o.phase = $1 AND o.lease_owner IS NULL
     ORDER BY o.tenant_id, o.available_at LIMIT 1)
    UNION ALL
    SELECT n.tenant_id, n.available_at, n.intent_id
    FROM tenants t
    CROSS JOIN LATERAL (
        SELECT o.tenant_id, o.available_at, o.intent_id FROM oncebox.outbox o
        WHERE o.phase = $1 AND o.lease_owner IS NULL AND o.tenant_id > t.tenant_id
        ORDER BY o.tenant_id, o.available_at LIMIT 1
    ) n
), heads AS (
    -- The tenants whose oldest row is ready, oldest first.
    SELECT tenant_id FROM tenants
    WHERE available_at <= now()
    ORDER BY available_at
    LIMIT $3
), share AS (
    SELECT ceil($3::float8 / greatest(count(*), 1))::int AS n FROM heads
), ready AS (
    SELECT r.intent_id, r.available_at,
           row_number() OVER (PARTITION BY h.tenant_id ORDER BY r.available_at) AS turn
    FROM heads h
    CROSS JOIN LATERAL (
        SELECT o.intent_id, o.available_at FROM oncebox.outbox o
        WHERE o.phase = $1 AND o.lease_owner IS NULL AND o.tenant_id = h.tenant_id
          AND o.available_at <= now()
        ORDER BY o.available_at
        LIMIT (SELECT n FROM share)
        FOR UPDATE SKIP LOCKED
    ) r
), expired AS (
    SELECT intent_id FROM oncebox.outbox
    WHERE lease_owner IS NOT NULL AND lease_expires_at < now() AND phase = $1
    ORDER BY lease_expires_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT intent_id FROM expired
    UNION ALL
    (SELECT intent_id FROM ready ORDER BY turn, available_at LIMIT $3)
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
