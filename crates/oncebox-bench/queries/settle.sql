-- After filling a backlog: fresh statistics and a checkpoint before the clock starts.
VACUUM ANALYZE oncebox.intents;
VACUUM ANALYZE oncebox.outbox;
CHECKPOINT;
