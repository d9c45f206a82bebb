-- The server's autovacuum switch and how often it visits each database: whether and how soon
-- the dead outbox rows of a drain are removed while it runs.
SELECT current_setting('autovacuum'), current_setting('autovacuum_naptime')
