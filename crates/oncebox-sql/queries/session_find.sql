-- Console: who is behind session $1 (the SHA-256 of its id) and the session's CSRF token, while
-- the session lives — and, for a token's session, while the token is neither revoked nor
-- expired. A token's session reads the token's tenant, role, label and holder; a person's, what
-- the sign-in recorded.
SELECT s.token_id, t.holder, s.principal,
       coalesce(t.tenant_id, s.tenant_id) AS tenant_id,
       coalesce(t.role, s.role) AS role,
       coalesce(t.label, s.email) AS label,
       s.csrf
FROM oncebox.console_sessions s
LEFT JOIN oncebox.api_tokens t ON t.id = s.token_id
WHERE s.id_hash = $1 AND s.expires_at > now()
  AND (s.token_id IS NULL
       OR (t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())))
