-- Console login: takes the login form under $1 (the SHA-256 of its id) while it lasts, once —
-- the row is deleted — and returns its CSRF token.
DELETE FROM oncebox.console_logins
WHERE id_hash = $1 AND expires_at > now()
RETURNING csrf
