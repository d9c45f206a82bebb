-- The two inserts of baseline/intake.sql, with the key bound ($1) instead of pgbench's random():
-- the raw intake run from this process, as oncebox's submit is.
WITH j AS (
  INSERT INTO baseline_journal (tenant_id, idempotency_key, request_hash, payload, status)
  VALUES ('tenant-42', $1, 'ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12',
          '{"action":"create_invoice","arguments":{"order_id":"order-8172","amount":"12500.00","currency":"RUB"}}',
          'pending')
  ON CONFLICT DO NOTHING RETURNING id)
INSERT INTO baseline_outbox (intent_id) SELECT id FROM j
