-- A journal of $1 terminal intents kept for retention, written directly with SQL shaped like a
-- delivered intent: status succeeded, one attempt, a receiver's answer, completed over the last
-- six days (inside a seven-day retention), spread over 100 tenants `kept-0`…; each with its
-- attempt row. Nothing in the outbox: the backlog drained beside it is filled afterwards.
WITH i AS (
    INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload,
                                 status, attempt_count, response, created_at, updated_at,
                                 completed_at)
    SELECT 'kept-' || (g % 100), 'kept-' || g, 'noop', repeat('0', 64),
           jsonb_build_object('n', g, 'amount', '12.50'), 'succeeded', 1,
           jsonb_build_object('id', 'ext-' || g, 'status', 'created'), t, t, t
    FROM generate_series(1, $1) g,
         LATERAL (SELECT now() - interval '6 days' * (g::float8 / $1)) AS at(t)
    RETURNING id, completed_at
)
INSERT INTO oncebox.attempts (intent_id, attempt, epoch, worker, phase, started_at,
                              finished_at, outcome, status_code)
SELECT id, 1, 1, 'kept', 'deliver', completed_at, completed_at, 'succeeded', 201 FROM i
