-- WAL bytes written since position $1 (the whole cluster's: nothing else should run meanwhile).
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::float8
