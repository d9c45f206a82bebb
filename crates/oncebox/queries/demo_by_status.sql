-- Intents per status.
SELECT status, count(*) FROM oncebox.intents GROUP BY status ORDER BY status
