-- Submit: the journal row and its deliver-phase outbox row in one statement, inside the
-- caller's transaction. Inserts nothing when (tenant_id, idempotency_key) already exists; the
-- caller then reads that row and compares hashes. When $11 is true, idle workers are woken with
-- NOTIFY (delivered at commit; nothing is sent if the caller rolls back).
WITH intent AS (
    INSERT INTO oncebox.intents AS i
        (tenant_id, idempotency_key, action, request_hash, payload,
         business_ref, run_id, step, deadline)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING i.*
), queued AS (
    INSERT INTO oncebox.outbox (intent_id, phase, arguments)
    SELECT id, 'deliver', $10 FROM intent
    RETURNING intent_id
), woken AS (
    SELECT pg_notify('oncebox_outbox', 'deliver') FROM queued WHERE $11
)
SELECT intent.*, (SELECT count(*) FROM woken) AS woken FROM intent
