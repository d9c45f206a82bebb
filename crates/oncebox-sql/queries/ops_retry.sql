-- Ops retry (in the operator's transaction, the intent locked, its originals checked by
-- ops_retry_check.sql): intent $1 back to pending with the same key. Its deliver row is queued
-- afresh (or reset, unleased and undispatched) carrying the original arguments when the
-- journal's are redacted — from the reconcile row it replaces or from held_arguments — and any
-- reconciliation is dropped. Attempt numbers go on from the intent's attempt_count; the retry
-- policy's budget starts again there (budget_from).
WITH intent AS (
    UPDATE oncebox.intents
    SET status = 'pending', completed_at = NULL, updated_at = now()
    WHERE id = $1
    RETURNING id, attempt_count, tenant_id
), reconcile AS (
    DELETE FROM oncebox.outbox WHERE intent_id = $1 AND phase = 'reconcile'
    RETURNING arguments
), held AS (
    DELETE FROM oncebox.held_arguments WHERE intent_id = $1
    RETURNING arguments
)
INSERT INTO oncebox.outbox AS o (intent_id, phase, tenant_id, arguments, attempt, budget_from)
SELECT id, 'deliver'::oncebox.phase, tenant_id,
       coalesce((SELECT arguments FROM reconcile), (SELECT arguments FROM held)),
       attempt_count, attempt_count
FROM intent
ON CONFLICT (intent_id, phase) DO UPDATE
SET available_at = now(), lease_owner = NULL, lease_expires_at = NULL, dispatched_at = NULL,
    arguments = coalesce(o.arguments, EXCLUDED.arguments),
    attempt = greatest(o.attempt, EXCLUDED.attempt),
    budget_from = greatest(o.attempt, EXCLUDED.attempt)
