-- Between two latency points: the journal and the outbox vacuumed, so that every point starts
-- from a clean table rather than from the dead rows of the one before.
VACUUM ANALYZE oncebox.outbox;
VACUUM ANALYZE oncebox.intents;
VACUUM ANALYZE oncebox.attempts
