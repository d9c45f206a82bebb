-- Console: the caller behind session $1 (the SHA-256 of its id) and the session's CSRF token,
-- while the session lives and its token is neither revoked nor expired.
SELECT t.id, t.tenant_id, t.role, t.expires_at, t.label, s.csrf
FROM oncebox.console_sessions s
JOIN oncebox.api_tokens t ON t.id = s.token_id
WHERE s.id_hash = $1 AND s.expires_at > now()
  AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
