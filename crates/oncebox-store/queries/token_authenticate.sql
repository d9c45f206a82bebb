-- The tenant and role of the live token whose hex SHA-256 is $1.
SELECT tenant_id, role FROM oncebox.api_tokens WHERE token_hash = $1 AND revoked_at IS NULL
