-- Console search: tenant $1's intents whose key or business reference is $2, newest first.
SELECT * FROM oncebox.intents
WHERE tenant_id = $1 AND (idempotency_key = $2 OR business_ref = $2)
ORDER BY id DESC
LIMIT 50
