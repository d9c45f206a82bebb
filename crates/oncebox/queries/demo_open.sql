-- Intents not yet terminal.
SELECT count(*) FROM oncebox.intents WHERE NOT oncebox.is_terminal(status)
