-- Readiness: how many of this binary's migrations ($1, their versions) the database has applied
-- successfully, by oncebox's own history table (never another application's).
SELECT count(*) FROM oncebox._sqlx_migrations WHERE success AND version = ANY ($1::bigint[])
