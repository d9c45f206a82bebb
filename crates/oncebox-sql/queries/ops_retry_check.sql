-- Ops retry: can intent $1 be re-sent with exactly what its first attempt sent? Returns whether
-- its journal payload is redacted (NULL: recorded before oncebox kept track) and whether the
-- original arguments are still held (on an outbox row or in held_arguments).
SELECT i.redacted,
       EXISTS (SELECT 1 FROM oncebox.held_arguments h WHERE h.intent_id = i.id)
    OR EXISTS (SELECT 1 FROM oncebox.outbox o
               WHERE o.intent_id = i.id AND o.phase IN ('deliver', 'reconcile')
                 AND o.arguments IS NOT NULL)
FROM oncebox.intents i WHERE i.id = $1
