-- Readiness: the database answers a query.
SELECT 1
