-- Audit: the newest $3 decisions, of tenant $1 and key $2 when given (NULL: all), newest first.
SELECT a.id, a.at, a.actor, a.role, a.via, a.label, a.action, a.reason, a.status_before, a.status_after,
       i.tenant_id, i.idempotency_key
FROM oncebox.audit a JOIN oncebox.intents i ON i.id = a.intent_id
WHERE ($1::text IS NULL OR i.tenant_id = $1) AND ($2::text IS NULL OR i.idempotency_key = $2)
ORDER BY a.id DESC
LIMIT $3
