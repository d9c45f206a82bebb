-- The intents that succeeded, as their delivery keys are made (tenant, key, key form): each
-- must have exactly one effect under its delivery key.
SELECT tenant_id, idempotency_key, key_form FROM oncebox.intents WHERE status = 'succeeded'
