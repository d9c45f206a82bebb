-- The keys of the intents that succeeded: each must have exactly one effect.
SELECT idempotency_key FROM oncebox.intents WHERE status = 'succeeded'
