-- Claim: lease up to $3 outbox rows of phase $1 for worker $2, for $4 seconds, in one
-- statement committed at once, fairly between tenants and at a cost that does not grow with
-- them: the tenants with unleased rows are visited in tenant order, one descent of the ready
-- index each, starting after $5 (the claimer's cursor: the last tenant its previous claim
-- visited, '' at first) and wrapping around once, until $3 tenants with ready rows are found or
-- every tenant has been visited. Those tenants each get an equal share of the batch, their
-- oldest rows first, taken round by round (every tenant's first row, then every second row…);
-- the claimer's next claim starts after the last tenant this one visited (`claim_cursor`), so a
-- tenant with ready work waits at most (tenants with ready work) / $3 claims of each claimer.
-- One tenant alone gets the whole batch in available_at order. Rows whose lease expired (a
-- crashed or stalled worker) are taken back first. Every claim bumps the fencing epoch.
-- Returns what the worker needs of each intent, so a delivery needs no further read.
-- `lease_taken_over` marks rows taken from another worker; `dispatched_at` set means an
-- earlier attempt may have reached the destination: its outcome is unknown. An intent still
-- awaiting approval is claimed only to be expired, its window closed (`approval_secs_left`).
WITH RECURSIVE tenants AS (
    -- Each visited tenant with its oldest unleased row, and how many tenants with ready rows
    -- were found so far: one descent of the ready index per tenant, the next one after the
    -- cursor, or the first of all once past the last (`wrapped`, at most once). These are
    -- index-only scans (the index ends with intent_id); the entries of rows claimed or deleted
    -- since are marked dead for every later scan by the plain index scans of `ready` below,
    -- which cross them one by one (every key is distinct: no posting list hides them).
    SELECT f.tenant_id, f.available_at, f.wrapped, 1 AS visited,
           (f.available_at <= now())::int AS found
    FROM ((SELECT o.tenant_id, o.available_at, o.intent_id, false AS wrapped
           FROM oncebox.outbox o
           WHERE o.phase = $1 AND o.lease_owner IS NULL AND o.tenant_id > $5
           ORDER BY o.tenant_id, o.available_at LIMIT 1)
          UNION ALL
          (SELECT o.tenant_id, o.available_at, o.intent_id, true
           FROM oncebox.outbox o
           WHERE o.phase = $1 AND o.lease_owner IS NULL
           ORDER BY o.tenant_id, o.available_at LIMIT 1)
          LIMIT 1) f
    UNION ALL
    SELECT n.tenant_id, n.available_at, n.wrapped, t.visited + 1,
           t.found + (n.available_at <= now())::int
    FROM tenants t
    CROSS JOIN LATERAL (
        (SELECT o.tenant_id, o.available_at, o.intent_id, t.wrapped AS wrapped
         FROM oncebox.outbox o
         WHERE o.phase = $1 AND o.lease_owner IS NULL AND o.tenant_id > t.tenant_id
         ORDER BY o.tenant_id, o.available_at LIMIT 1)
        UNION ALL
        (SELECT o.tenant_id, o.available_at, o.intent_id, true
         FROM oncebox.outbox o
         WHERE o.phase = $1 AND o.lease_owner IS NULL AND NOT t.wrapped
         ORDER BY o.tenant_id, o.available_at LIMIT 1)
        LIMIT 1
    ) n
    -- Enough tenants with ready rows, or back where this claim started.
    WHERE t.found < $3 AND NOT (n.wrapped AND n.tenant_id > $5)
), heads AS (
    -- The visited tenants whose oldest row is ready, in the order they were visited.
    SELECT tenant_id, row_number() OVER (ORDER BY visited) AS place FROM tenants
    WHERE available_at <= now()
), share AS (
    -- Each tenant's share: the batch split evenly, the first tenants taking one more each
    -- when it does not divide, so that no more rows are locked than the batch takes.
    SELECT $3 / greatest(count(*), 1) AS each, $3 % greatest(count(*), 1) AS more FROM heads
), ready AS (
    SELECT r.intent_id, r.available_at,
           row_number() OVER (PARTITION BY h.tenant_id ORDER BY r.available_at) AS turn
    FROM heads h
    CROSS JOIN share s
    CROSS JOIN LATERAL (
        SELECT o.intent_id, o.available_at FROM oncebox.outbox o
        WHERE o.phase = $1 AND o.lease_owner IS NULL AND o.tenant_id = h.tenant_id
          AND o.available_at <= now()
        ORDER BY o.available_at
        LIMIT s.each + (h.place <= s.more)::int
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
          i.tenant_id, i.idempotency_key, i.key_form, i.action, i.request_hash, i.payload, i.status,
          i.external_reference, i.last_error, i.attempt_count, i.created_at, i.updated_at,
          i.deadline, i.deadline IS NOT NULL AND i.deadline <= now() AS deadline_passed,
          extract(epoch FROM i.approval_expires_at - now())::float8 AS approval_secs_left,
          (SELECT tenant_id FROM tenants ORDER BY visited DESC LIMIT 1) AS claim_cursor
