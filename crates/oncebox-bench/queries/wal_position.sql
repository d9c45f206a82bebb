-- The server's WAL insert position, as text (to measure the WAL a phase writes).
SELECT pg_current_wal_insert_lsn()::text
