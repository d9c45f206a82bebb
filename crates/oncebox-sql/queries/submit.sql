-- Submit: the journal row and its deliver-phase outbox row in one statement, inside the
-- caller's transaction. Inserts nothing when (tenant_id, idempotency_key) already exists; the
-- caller then reads that row and compares hashes. Parameters, in order: tenant, key, action,
-- request hash, payload (redacted), business_ref, run_id, step, deadline; the tenth holds the
-- original arguments only when redaction changed them; when the eleventh is true and a worker
-- is waiting (oncebox.waiting_workers), it is woken with NOTIFY on the channel named by the
-- twelfth, delivered at commit (never on rollback). The NOTIFY sits in the outbox insert's
-- RETURNING because a data-modifying CTE always runs to completion. Returns only what the
-- caller does not already have. The Python binding runs this text too (no placeholder may
-- appear in a comment: see oncebox_sql::pyformat).
WITH intent AS (
    INSERT INTO oncebox.intents AS i
        (tenant_id, idempotency_key, action, request_hash, payload,
         business_ref, run_id, step, deadline, redacted)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb IS NOT NULL)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING i.id, i.created_at
), queued AS (
    INSERT INTO oncebox.outbox (intent_id, phase, arguments, tenant_id)
    SELECT id, 'deliver'::oncebox.phase, $10, $1 FROM intent
    RETURNING CASE WHEN $11 AND EXISTS (
        SELECT 1 FROM oncebox.waiting_workers WHERE seen_at > now() - interval '1 minute')
      THEN pg_notify($12, 'deliver') END
)
SELECT id, created_at FROM intent
