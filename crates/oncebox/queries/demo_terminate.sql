-- Cuts connection $1 from the server side (waiting up to 5 s for it to end).
SELECT pg_terminate_backend($1, 5000)
