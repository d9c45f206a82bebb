-- A backlog of $1 intents spread over $2 tenants (`bench` when one, `bench-0`… otherwise, each
-- with ready work) and $3 actions (`noop` when one, `noop-0`… otherwise), journal and outbox
-- rows written directly (the intake is measured elsewhere).
WITH i AS (
    INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload)
    SELECT CASE WHEN $2 = 1 THEN 'bench' ELSE 'bench-' || (g % $2) END,
           'backlog-' || g,
           CASE WHEN $3 = 1 THEN 'noop' ELSE 'noop-' || (g % $3) END,
           repeat('0', 64), '{"n": 1}'
    FROM generate_series(1, $1) g
    RETURNING id, tenant_id
)
INSERT INTO oncebox.outbox (intent_id, phase, tenant_id)
SELECT id, 'deliver'::oncebox.phase, tenant_id FROM i
