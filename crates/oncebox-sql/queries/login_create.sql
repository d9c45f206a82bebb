-- Console login page: a login form under the SHA-256 $1 of its random id, with CSRF token $2,
-- lasting $3 seconds; for a sign-in through OpenID Connect, $2 is the `state` sent to the
-- provider and $4 and $5 its nonce and PKCE verifier (null for a token login form). Forms past
-- their time are removed in the same statement.
WITH gone AS (DELETE FROM oncebox.console_logins WHERE expires_at < now())
INSERT INTO oncebox.console_logins (id_hash, csrf, expires_at, nonce, pkce_verifier)
VALUES ($1, $2, now() + make_interval(secs => $3), $4, $5)
