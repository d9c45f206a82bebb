-- Ops: an intent by key ($1) — of tenant $2, or of any tenant when $2 is NULL — or, with no
-- tenant named, by numeric id. Matches by key first; at most ten rows, so that a key used by
-- several tenants can be reported as ambiguous.
SELECT * FROM oncebox.intents
WHERE (idempotency_key = $1 AND ($2::text IS NULL OR tenant_id = $2))
   OR ($2::text IS NULL AND $1 ~ '^[0-9]{1,18}$' AND id = $1::bigint)
ORDER BY (idempotency_key = $1) DESC
LIMIT 10
