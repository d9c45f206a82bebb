-- The server process of this connection, so that the demo can cut it before commit.
SELECT pg_backend_pid()
