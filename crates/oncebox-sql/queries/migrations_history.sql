-- oncebox's own migration history, in its own schema: the table sqlx keeps (same columns as
-- sqlx's `_sqlx_migrations`), so that an application sharing the database keeps its own
-- `public._sqlx_migrations` to itself. Run with the simple protocol (two statements).
CREATE SCHEMA IF NOT EXISTS oncebox;
CREATE TABLE IF NOT EXISTS oncebox._sqlx_migrations (
    version BIGINT PRIMARY KEY,
    description TEXT NOT NULL,
    installed_on TIMESTAMPTZ NOT NULL DEFAULT now(),
    success BOOLEAN NOT NULL,
    checksum BYTEA NOT NULL,
    execution_time BIGINT NOT NULL
);
