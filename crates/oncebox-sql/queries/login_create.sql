-- Console login page: a login form under the SHA-256 $1 of its random id, with CSRF token $2,
-- lasting $3 seconds. Forms past their time are removed in the same statement.
WITH gone AS (DELETE FROM oncebox.console_logins WHERE expires_at < now())
INSERT INTO oncebox.console_logins (id_hash, csrf, expires_at)
VALUES ($1, $2, now() + make_interval(secs => $3))
