-- Ops: intents by optional status, tenant, action and age (not updated for $4 seconds),
-- oldest first.
SELECT * FROM oncebox.intents
WHERE ($1::oncebox.intent_status IS NULL OR status = $1)
  AND ($2::text IS NULL OR tenant_id = $2)
  AND ($3::text IS NULL OR action = $3)
  AND ($4::float8 IS NULL OR updated_at < now() - make_interval(secs => $4))
ORDER BY updated_at, id
LIMIT $5
