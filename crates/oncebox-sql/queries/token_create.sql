-- A bearer token for tenant $1 with role $2, stored as the hex SHA-256 $3 of the token (the
-- token itself is shown once and never stored), with an optional label $4 and lifetime $5
-- (seconds; NULL for no expiry), issued to holder $6 (NULL: it names none). Returns its id.
INSERT INTO oncebox.api_tokens (tenant_id, role, token_hash, label, expires_at, holder)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5), $6)
RETURNING id
