-- Submit with an ordering key (migrations/0011_lanes.sql): as submit.sql, with its parameters
-- numbered in the order they first appear here — tenant, ordering key, the lane's destination,
-- whether that destination skips failed heads (on_failure = "skip"), key, action, request hash,
-- payload, business_ref, run_id, step, deadline, original arguments, approvals needed, approval
-- window, submitter (as in submit.sql), notify, channel. The intent
-- joins the lane (tenant, destination, ordering key) and takes its next number under the lane
-- row's lock, held to the caller's commit: a lane's numbers follow commit order, and a rollback
-- gives its number back. The intent is queued ready when it is the lane's head (the lane was
-- idle) and parked behind the head otherwise (available_at infinity, out of the claim's reach);
-- a head awaiting approval holds its lane and is queued for the end of its approval window.
-- An intent awaiting approval gets an ask row, as in submit.sql, wherever it stands in its lane.
-- A key that already exists takes no number: nothing is inserted and the caller reads that row,
-- as in submit.sql. The delivery key's form is this release's, as in submit.sql. A waiting worker is woken only for a ready row.
WITH lane AS (
    INSERT INTO oncebox.lanes AS l (tenant_id, ordering_key, destination, skip_failed)
    SELECT $1::text, $2::text, $3::text, $4::boolean
    WHERE NOT EXISTS (SELECT 1 FROM oncebox.intents
                      WHERE tenant_id = $1::text AND idempotency_key = $5::text)
    ON CONFLICT (tenant_id, destination, ordering_key) DO UPDATE
    SET last_seq = l.last_seq + 1, skip_failed = EXCLUDED.skip_failed, updated_at = now()
    RETURNING l.id, l.last_seq, l.head_seq
), intent AS (
    INSERT INTO oncebox.intents AS i
        (tenant_id, ordering_key, idempotency_key, action, request_hash, payload,
         business_ref, run_id, step, deadline, redacted, lane_id, lane_seq,
         status, approvals_needed, approval_expires_at, submitted_by, key_form)
    SELECT $1::text, $2::text, $5::text, $6::text, $7::text, $8::jsonb, $9::text, $10::text,
           $11::text, $12::timestamptz, $13::jsonb IS NOT NULL, lane.id, lane.last_seq,
           CASE WHEN $14::smallint IS NULL THEN 'pending'
                ELSE 'awaiting_approval' END::oncebox.intent_status,
           $14::smallint,
           CASE WHEN $14::smallint IS NOT NULL
                THEN least(now() + make_interval(secs => $15::float8),
                           coalesce($12::timestamptz, 'infinity')) END,
           coalesce($16::text, 'db:' || session_user), 1
    FROM lane
    ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
    RETURNING i.id, i.created_at, i.status, i.approval_expires_at, i.key_form, i.submitted_by
), queued AS (
    INSERT INTO oncebox.outbox (intent_id, phase, tenant_id, arguments, available_at)
    SELECT intent.id, 'deliver'::oncebox.phase, $1::text, $13::jsonb,
           CASE WHEN lane.last_seq <> lane.head_seq THEN 'infinity'
                ELSE coalesce(intent.approval_expires_at, now()) END
    FROM intent, lane
    RETURNING CASE WHEN $17::boolean AND available_at <= now() AND EXISTS (
        SELECT 1 FROM oncebox.waiting_workers WHERE seen_at > now() - interval '1 minute')
      THEN pg_notify($18::text, 'deliver') END
), asked AS (
    INSERT INTO oncebox.outbox (intent_id, phase, tenant_id)
    SELECT id, 'ask'::oncebox.phase, $1::text FROM intent WHERE status = 'awaiting_approval'
)
SELECT id, created_at, status, approval_expires_at, key_form, submitted_by FROM intent
