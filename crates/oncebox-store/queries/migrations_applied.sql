-- Readiness: how many of oncebox's migrations have been applied successfully.
SELECT count(*) FROM _sqlx_migrations WHERE success
