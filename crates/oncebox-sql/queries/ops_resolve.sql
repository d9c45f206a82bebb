-- Ops resolve (the intent locked): intent $1 ends with status $2 (succeeded or failed), the
-- receiver's reference $3 and the error $4 when given; its pending deliveries and lookups go.
-- Its original arguments (when redacted) stay held while it is failed — an operator may still
-- retry it — and go once it succeeded.
WITH intent AS (
    UPDATE oncebox.intents
    SET status = $2, external_reference = coalesce($3, external_reference),
        last_error = coalesce($4, last_error), updated_at = now(), completed_at = now()
    WHERE id = $1
    RETURNING id, status
), work AS (
    DELETE FROM oncebox.outbox o USING intent
    WHERE o.intent_id = intent.id AND o.phase IN ('deliver', 'reconcile')
    RETURNING o.arguments
), released AS (
    DELETE FROM oncebox.held_arguments h USING intent
    WHERE h.intent_id = intent.id AND NOT oncebox.is_retryable(intent.status)
)
INSERT INTO oncebox.held_arguments (intent_id, arguments)
SELECT intent.id, work.arguments FROM intent, work
WHERE work.arguments IS NOT NULL AND oncebox.is_retryable(intent.status)
ON CONFLICT (intent_id) DO NOTHING
