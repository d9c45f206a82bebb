-- Approvals (the intent locked by ops_lock.sql): the arguments intent $1 will be delivered
-- with — the originals its deliver row holds when redaction changed them, else the stored
-- arguments, which are the originals. Null when a redacted intent's originals are not held.
SELECT CASE WHEN i.redacted THEN o.arguments ELSE i.payload END AS arguments
FROM oncebox.intents i
LEFT JOIN oncebox.outbox o ON o.intent_id = i.id AND o.phase = 'deliver'
WHERE i.id = $1
