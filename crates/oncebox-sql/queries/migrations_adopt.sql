-- Move oncebox's own rows — those whose version *and* checksum are one of this binary's
-- migrations ($1 versions, $2 checksums) — from the shared `_sqlx_migrations` into
-- oncebox._sqlx_migrations. An application's rows are never touched. Run under
-- oncebox_store's adoption lock; returns the rows moved.
WITH moved AS (
    DELETE FROM _sqlx_migrations l
    USING unnest($1::bigint[], $2::bytea[]) AS ours(version, checksum)
    WHERE l.version = ours.version AND l.checksum = ours.checksum
    RETURNING l.version, l.description, l.installed_on, l.success, l.checksum, l.execution_time
)
INSERT INTO oncebox._sqlx_migrations
    (version, description, installed_on, success, checksum, execution_time)
SELECT version, description, installed_on, success, checksum, execution_time FROM moved
ON CONFLICT (version) DO NOTHING
