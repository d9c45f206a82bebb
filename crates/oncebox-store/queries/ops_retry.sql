-- Ops retry (in the operator's transaction, the intent locked): intent $1 back to pending with
-- the same key; its deliver row is queued afresh (or reset, unleased and undispatched) and any
-- reconciliation dropped.
WITH intent AS (
    UPDATE oncebox.intents
    SET status = 'pending', completed_at = NULL, updated_at = now()
    WHERE id = $1
    RETURNING id
), reconcile AS (
    DELETE FROM oncebox.outbox WHERE intent_id = $1 AND phase = 'reconcile'
)
INSERT INTO oncebox.outbox (intent_id, phase)
SELECT id, 'deliver'::oncebox.phase FROM intent
ON CONFLICT (intent_id, phase) DO UPDATE
SET available_at = now(), lease_owner = NULL, lease_expires_at = NULL, dispatched_at = NULL
