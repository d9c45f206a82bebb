-- One intent by its tenant and idempotency key (the journal's unique key).
SELECT * FROM oncebox.intents WHERE tenant_id = $1 AND idempotency_key = $2
