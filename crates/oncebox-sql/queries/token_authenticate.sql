-- The live token whose hex SHA-256 is $1 (not revoked, not expired): its id, tenant, role,
-- expiry, label and holder. Marks it used, at most once a minute: the API asks here only when its few-second
-- cache misses, and the guard keeps even that from writing every time.
WITH t AS (
    SELECT id, tenant_id, role, expires_at, last_used_at, label, holder
    FROM oncebox.api_tokens
    WHERE token_hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
), used AS (
    UPDATE oncebox.api_tokens a SET last_used_at = now()
    FROM t
    WHERE a.id = t.id AND (t.last_used_at IS NULL OR t.last_used_at < now() - interval '1 minute')
)
SELECT id, tenant_id, role, expires_at, label, holder FROM t
