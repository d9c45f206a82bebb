-- Console logout: ends session $1 (the SHA-256 of its id).
DELETE FROM oncebox.console_sessions WHERE id_hash = $1
