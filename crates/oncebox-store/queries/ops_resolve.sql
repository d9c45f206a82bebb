-- Ops resolve (the intent locked): intent $1 ends with status $2 (succeeded or failed), the
-- receiver's reference $3 and the error $4 when given; its pending deliveries and lookups go.
WITH intent AS (
    UPDATE oncebox.intents
    SET status = $2, external_reference = coalesce($3, external_reference),
        last_error = coalesce($4, last_error), updated_at = now(), completed_at = now()
    WHERE id = $1
    RETURNING id
)
DELETE FROM oncebox.outbox o USING intent
WHERE o.intent_id = intent.id AND o.phase IN ('deliver', 'reconcile')
