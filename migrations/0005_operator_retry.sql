-- An operator's retry re-sends exactly what the first attempt sent, and attempt numbers only
-- grow for the life of an intent (docs/architecture.md, "Operators").

-- Whether the journal's payload is the redacted form of the request. Set by every submit; NULL
-- for intents recorded before this migration whose originals are no longer on an outbox row
-- (an operator retry of those is refused: what was sent cannot be known).
ALTER TABLE oncebox.intents ADD COLUMN redacted boolean;
UPDATE oncebox.intents i SET redacted = (o.arguments IS NOT NULL)
FROM oncebox.outbox o
WHERE o.intent_id = i.id AND o.phase IN ('deliver', 'reconcile');

-- The original arguments of a redacted intent that ended where an operator may retry it
-- (failed, needs_review), kept until it is retried, resolved as succeeded, or purged. While the
-- intent is being delivered the originals live on its outbox row, as before.
CREATE TABLE oncebox.held_arguments (
    intent_id bigint      PRIMARY KEY REFERENCES oncebox.intents (id) ON DELETE CASCADE,
    arguments jsonb       NOT NULL,
    held_at   timestamptz NOT NULL DEFAULT now()
);

-- The attempt count when an operator last retried the intent: the retry policy's attempt budget
-- counts from here, while the attempt number goes on from the count.
ALTER TABLE oncebox.outbox ADD COLUMN budget_from integer NOT NULL DEFAULT 0;

-- The statuses an operator may send back to pending (oncebox_core::OPERATOR_TRANSITIONS; a test
-- holds them equal): their originals are held.
CREATE FUNCTION oncebox.is_retryable(s oncebox.intent_status) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT s IN ('failed', 'needs_review') $$;
