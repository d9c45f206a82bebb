-- Ops stats: intents per status. A scan of the journal: an ops command, not a hot path.
SELECT status, count(*) FROM oncebox.intents GROUP BY status ORDER BY status
