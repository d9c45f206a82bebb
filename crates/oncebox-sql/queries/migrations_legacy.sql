-- Is there an unqualified `_sqlx_migrations` (found by search_path, normally
-- public._sqlx_migrations) outside the oncebox schema? oncebox up to migration 0004 recorded its
-- history there, beside any application's.
SELECT coalesce((
    SELECT n.nspname <> 'oncebox'
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = to_regclass('_sqlx_migrations')), false)
