-- Tokens, newest first: never the secret (only its hash is stored, and not shown either). $1
-- limits to a tenant when given; $2 includes revoked and expired ones.
SELECT id, tenant_id, role, label, holder, created_at, expires_at, last_used_at, revoked_at
FROM oncebox.api_tokens
WHERE ($1::text IS NULL OR tenant_id = $1)
  AND ($2 OR (revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())))
ORDER BY id DESC
