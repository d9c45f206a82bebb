-- Console login: takes the login form under $1 (the SHA-256 of its id) while it lasts, once —
-- the row is deleted — and returns its CSRF token (a sign-in's `state`), nonce and PKCE
-- verifier.
DELETE FROM oncebox.console_logins
WHERE id_hash = $1 AND expires_at > now()
RETURNING csrf, nonce, pkce_verifier
