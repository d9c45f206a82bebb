-- The newest migration the database has applied, by oncebox's own history (NULL for none).
SELECT max(version) FROM oncebox._sqlx_migrations WHERE success
