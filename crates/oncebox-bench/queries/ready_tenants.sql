-- Tenants with ready work: the tenants of the outbox's rows.
SELECT count(DISTINCT tenant_id) FROM oncebox.outbox
