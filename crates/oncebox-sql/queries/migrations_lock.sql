-- Migrations: the transaction-scoped advisory lock $1 that one process at a time takes to move
-- oncebox's history out of a shared `_sqlx_migrations` (released at commit or rollback).
SELECT pg_advisory_xact_lock($1)
