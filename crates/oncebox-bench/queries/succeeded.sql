-- Intents that succeeded.
SELECT count(*) FROM oncebox.intents WHERE status = 'succeeded'
