-- Console login: a session under the SHA-256 $1 of its random id, with CSRF token $3, ending $4
-- seconds from now — for token $2 (the token's own expiry still applies at every request), or,
-- when $2 is null, for the person signed in through OpenID Connect: principal $5, e-mail $6,
-- tenant $7 and role $8. Expired sessions are removed in the same statement.
WITH gone AS (DELETE FROM oncebox.console_sessions WHERE expires_at < now())
INSERT INTO oncebox.console_sessions
    (id_hash, token_id, csrf, expires_at, principal, email, tenant_id, role)
VALUES ($1, $2, $3, now() + make_interval(secs => $4), $5, $6, $7, $8)
