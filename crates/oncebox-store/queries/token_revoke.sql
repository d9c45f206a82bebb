-- Revokes the live token whose hex SHA-256 is $1; affects one row or none.
UPDATE oncebox.api_tokens SET revoked_at = now() WHERE token_hash = $1 AND revoked_at IS NULL
