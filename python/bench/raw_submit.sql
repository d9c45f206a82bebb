-- The benchmark's raw case: the journal row and the outbox row that oncebox.submit writes, sent
-- as two plain inserts in one statement by psycopg, with the values an orchestrator writing the
-- rows by hand would bind (tenant, key, action, request hash, payload: they change with every
-- intent) — and no validation, no hashing, no redaction, no wake-up of waiting workers.
WITH j AS (
  INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload)
  VALUES (%s, %s, %s, %s, %s)
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING id, tenant_id)
INSERT INTO oncebox.outbox (intent_id, phase, tenant_id) SELECT id, 'deliver', tenant_id FROM j
