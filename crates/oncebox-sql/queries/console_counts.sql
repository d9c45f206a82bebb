-- Console overview: tenant $1's intents per action and status. A scan of the tenant's part of
-- the journal (the (tenant_id, idempotency_key) index): an operator's page, not a hot path.
SELECT action, status, count(*) AS n
FROM oncebox.intents
WHERE tenant_id = $1
GROUP BY action, status
ORDER BY action, status
