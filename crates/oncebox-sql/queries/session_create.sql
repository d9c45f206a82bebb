-- Console login: a session for token $2 under the SHA-256 $1 of its random id, with CSRF token
-- $3, ending $4 seconds from now (the token's own expiry still applies at every request).
-- Expired sessions are removed in the same statement.
WITH gone AS (DELETE FROM oncebox.console_sessions WHERE expires_at < now())
INSERT INTO oncebox.console_sessions (id_hash, token_id, csrf, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4))
