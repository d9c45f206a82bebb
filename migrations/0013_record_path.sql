-- A cheaper record path (issue 18): fewer index entries and row locks written per attempt.
--
-- 1. The retry report's rows are only ever found by intent (attempts_by_intent: the history,
--    the purge), never by id alone, so the primary key's index on attempts.id was written by
--    every attempt and read by nothing. The id column stays, still filled by its identity: it
--    orders an intent's rows in the history.
-- 2. The foreign key from attempts to intents checked every attempt by locking its intent's row
--    (FOR KEY SHARE: a WAL record, and a full-page image after each checkpoint, per attempt;
--    pg_waldump showed about two per delivery). Attempts are written only by the record
--    statement, for outbox rows a worker still holds, and by operators inside a transaction
--    that locked the intent: their intent exists. What the key did for a purge, removing an
--    intent's attempts with it, a statement-level trigger does now, for this release's purge
--    and any older binary's alike.
ALTER TABLE oncebox.attempts DROP CONSTRAINT attempts_pkey;
ALTER TABLE oncebox.attempts DROP CONSTRAINT attempts_intent_id_fkey;

CREATE FUNCTION oncebox.intents_purge_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM oncebox.attempts a USING gone WHERE a.intent_id = gone.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER intents_purge_attempts AFTER DELETE ON oncebox.intents
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION oncebox.intents_purge_attempts();
