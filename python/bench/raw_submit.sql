-- The benchmark's raw case: the journal row and the outbox row that oncebox.submit writes, sent
-- as two plain inserts with a precomputed hash and payload (no validation, no hash, no redaction,
-- no wake-up of waiting workers): what an orchestrator writing the rows by hand would send.
WITH j AS (
  INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload)
  VALUES ('tenant-42', %s, 'create_invoice',
          'ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12',
          '{"order_id":"order-8172","amount":"12500.00","currency":"RUB"}')
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING id)
INSERT INTO oncebox.outbox (intent_id, phase) SELECT id, 'deliver' FROM j
