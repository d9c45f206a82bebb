-- Console login forms. Each login page served opens a login form record: the SHA-256 of a
-- random id held in the login page's cookie, and the CSRF token its form carries. A login is
-- accepted only for a form the server served, once, within ten minutes — its CSRF token bound
-- to a record of the server's own rather than to a cookie any neighbouring site could set — and
-- a login that names no such form is refused before its body is read.
CREATE TABLE oncebox.console_logins (
    id_hash    text        PRIMARY KEY CHECK (id_hash ~ '^[0-9a-f]{64}$'),
    csrf       text        NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_logins_expiry ON oncebox.console_logins (expires_at);
