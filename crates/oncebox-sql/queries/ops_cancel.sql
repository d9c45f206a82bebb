-- Ops cancel, second step: intent $1 is cancelled and its deliver row removed.
WITH intent AS (
    UPDATE oncebox.intents
    SET status = 'cancelled', updated_at = now(), completed_at = now()
    WHERE id = $1
    RETURNING id
)
DELETE FROM oncebox.outbox o USING intent
WHERE o.intent_id = intent.id AND o.phase = 'deliver'
