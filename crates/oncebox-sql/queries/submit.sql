-- Submit: the journal row and its deliver-phase outbox row in one statement, inside the
-- caller's transaction. Inserts nothing when (tenant_id, idempotency_key) already exists; the
-- caller then reads that row and compares hashes. Parameters, in order: tenant, key, action,
-- request hash, payload (redacted), business_ref, run_id, step, deadline; the tenth holds the
-- original arguments only when redaction changed them. The eleventh is how many people must
-- approve the intent (null: none, its action's approval policy does not ask) and the twelfth
-- how many seconds they have; the thirteenth is the principal who submits it
-- (oncebox_core::Principal: an API token's, one the writer configured) — null: the database
-- role the statement runs under, recorded as `db:ROLE` — which may not approve it. When the fourteenth is true and a worker is waiting
-- (oncebox.waiting_workers), it is woken with NOTIFY on the channel named by the fifteenth,
-- delivered at commit (never on rollback). An intent that needs approval is written
-- awaiting_approval, and its deliver row is queued for the end of that window (or the deadline,
-- when earlier), when a worker expires it unless the approvals came first (ops_approve.sql),
-- and it gets an ask row too: the "approval requested" message to its policy's notify
-- destination, sent (or dropped, without one) by a worker at once. The NOTIFY sits in the outbox insert's RETURNING because a data-modifying CTE always runs to
-- completion. Returns only what the
-- caller does not already have. The intent's delivery key takes this release's form (1,
-- oncebox_core::KeyForm::CURRENT: unique across tenants). The Python binding runs this text too (no placeholder may
-- appear in a comment: see oncebox_sql::pyformat).
WITH intent AS (
    INSERT INTO oncebox.intents AS i
        (tenant_id, idempotency_key, action, request_hash, payload,
         business_ref, run_id, step, deadline, redacted,
         status, approvals_needed, approval_expires_at, submitted_by, key_form)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb IS NOT NULL,
            CASE WHEN $11::smallint IS NULL THEN 'pending'
                 ELSE 'awaiting_approval' END::oncebox.intent_status,
            $11::smallint,
            CASE WHEN $11::smallint IS NOT NULL
                 THEN least(now() + make_interval(secs => $12::float8),
                            coalesce($9::timestamptz, 'infinity')) END,
            coalesce($13::text, 'db:' || session_user), 1)
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING i.id, i.created_at, i.status, i.approval_expires_at, i.key_form, i.submitted_by
), queued AS (
    INSERT INTO oncebox.outbox (intent_id, phase, arguments, tenant_id, available_at)
    SELECT id, 'deliver'::oncebox.phase, $10, $1, coalesce(approval_expires_at, now())
    FROM intent
    RETURNING CASE WHEN $14 AND available_at <= now() AND EXISTS (
        SELECT 1 FROM oncebox.waiting_workers WHERE seen_at > now() - interval '1 minute')
      THEN pg_notify($15, 'deliver') END
), asked AS (
    INSERT INTO oncebox.outbox (intent_id, phase, tenant_id)
    SELECT id, 'ask'::oncebox.phase, $1 FROM intent WHERE status = 'awaiting_approval'
)
SELECT id, created_at, status, approval_expires_at, key_form, submitted_by FROM intent
