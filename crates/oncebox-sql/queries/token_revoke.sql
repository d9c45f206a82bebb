-- Revokes the live tokens that match: by hex SHA-256 $1, by id $2 or by label $3 (exactly one
-- of them is given). Returns the ids revoked.
UPDATE oncebox.api_tokens SET revoked_at = now()
WHERE revoked_at IS NULL
  AND (token_hash = $1 OR id = $2 OR label = $3)
RETURNING id
