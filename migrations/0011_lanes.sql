-- Ordering lanes (issue 17): intents submitted with an `ordering_key` are delivered strictly in
-- submit order within their lane — one (tenant, destination, ordering_key) — at most one in
-- flight. Intents without an ordering key never touch this table.
--
-- How: every lane intent gets the next number of its lane (`lane_seq`, taken under the lane
-- row's lock, so numbers follow commit order and a rolled-back submit gives its number back).
-- The lane's `head_seq` names the one intent allowed to run. An intent that is not the head is
-- queued with `available_at = 'infinity'` (parked): the claim's index scan stops at `now()` and
-- never sees it, so the claim path is unchanged. When the head is released — it succeeded or
-- was cancelled, or it ended failed, expired or needs_review on a lane that skips failures, or
-- an operator skipped it — the trigger below moves `head_seq` on, past any numbers with nothing
-- left to do, and unparks the next intent. A head that ends failed, expired or needs_review
-- blocks its lane (its followers stay parked) until an operator retries it, resolves it as
-- succeeded, or skips it (`oncebox ops lanes skip`).
CREATE TABLE oncebox.lanes (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id    text        NOT NULL,
    destination  text        NOT NULL,
    ordering_key text        NOT NULL,
    last_seq     bigint      NOT NULL DEFAULT 1,       -- the newest intent's number
    head_seq     bigint      NOT NULL DEFAULT 1,       -- the intent allowed to run; > last_seq: idle
    skip_failed  boolean     NOT NULL DEFAULT false,   -- [destinations.X.ordering] on_failure
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lanes_key UNIQUE (tenant_id, destination, ordering_key),
    CONSTRAINT lanes_head CHECK (head_seq BETWEEN 1 AND last_seq + 1)
);
-- Lanes with work (for `oncebox ops lanes` and the repair sweep).
CREATE INDEX lanes_busy ON oncebox.lanes (tenant_id, id) WHERE head_seq <= last_seq;

-- Nullable and without default: adding them rewrites nothing, and an intent without an
-- ordering key stores only null bits.
ALTER TABLE oncebox.intents
    ADD COLUMN ordering_key text,
    ADD COLUMN lane_id bigint,
    ADD COLUMN lane_seq bigint,
    ADD CONSTRAINT intents_lane_whole
        CHECK ((ordering_key IS NULL) = (lane_id IS NULL) AND (lane_id IS NULL) = (lane_seq IS NULL));
CREATE UNIQUE INDEX intents_lane ON oncebox.intents (lane_id, lane_seq) WHERE lane_id IS NOT NULL;

-- Moves lane `p_lane` on from its head `p_from` when that head is released by status `p_status`
-- (or always, with `p_force`: an operator's skip), then past every number whose intent has
-- nothing left to do (succeeded, cancelled, or a replayed submit that left no intent), and
-- unparks the first intent that has, waking a waiting worker. Holds the lane row's lock from its
-- first UPDATE, so every submit that numbered an intent before it has committed, and each of
-- its later statements (a fresh snapshot each, in READ COMMITTED) sees that intent. Returns the
-- new head's number, or null when nothing moved.
CREATE FUNCTION oncebox.lane_advance(p_lane bigint, p_from bigint,
                                     p_status oncebox.intent_status, p_force boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    h     bigint;
    last  bigint;
    iid   bigint;
    st    oncebox.intent_status;
BEGIN
    UPDATE oncebox.lanes
    SET head_seq = head_seq + 1, updated_at = now()
    WHERE id = p_lane AND head_seq = p_from
      AND (p_force OR p_status IN ('succeeded', 'cancelled')
           OR (skip_failed AND oncebox.is_dead_letter(p_status)))
    RETURNING head_seq, last_seq INTO h, last;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    LOOP
        EXIT WHEN h > last;
        SELECT id, status INTO iid, st FROM oncebox.intents WHERE lane_id = p_lane AND lane_seq = h;
        IF FOUND AND st NOT IN ('succeeded', 'cancelled') THEN
            UPDATE oncebox.outbox SET available_at = now()
            WHERE intent_id = iid AND phase = 'deliver' AND available_at = 'infinity';
            IF FOUND AND EXISTS (SELECT 1 FROM oncebox.waiting_workers
                                 WHERE seen_at > now() - interval '1 minute') THEN
                PERFORM pg_notify('oncebox_outbox', 'deliver');
            END IF;
            EXIT;
        END IF;
        UPDATE oncebox.lanes SET head_seq = head_seq + 1 WHERE id = p_lane
        RETURNING head_seq INTO h;
    END LOOP;
    RETURN h;
END $$;

-- Every status change of a lane intent into a settled status may release its lane.
CREATE FUNCTION oncebox.lane_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM oncebox.lane_advance(NEW.lane_id, NEW.lane_seq, NEW.status, false);
    RETURN NULL;
END $$;

CREATE TRIGGER intents_lane_release
    AFTER UPDATE OF status ON oncebox.intents
    FOR EACH ROW
    WHEN (NEW.lane_id IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status
          AND oncebox.is_settled(NEW.status))
    EXECUTE FUNCTION oncebox.lane_release();

-- Repairs lane `p_lane` when its head has nothing left to do: a submit of a key that already
-- existed, racing with the first submit of that key, took a number and left no intent. Takes the
-- lane's lock without waiting (a lane being submitted to is not stuck), then looks again with a
-- fresh snapshot: a head with nothing left to do is moved on; a live head still parked is
-- unparked. Workers run it over the busy lanes every few seconds. Returns the head's number, or
-- null when the lane was locked, idle or had nothing to repair.
CREATE FUNCTION oncebox.lane_repair(p_lane bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    h   bigint;
    iid bigint;
    st  oncebox.intent_status;
BEGIN
    SELECT head_seq INTO h FROM oncebox.lanes
    WHERE id = p_lane AND head_seq <= last_seq
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT id, status INTO iid, st FROM oncebox.intents WHERE lane_id = p_lane AND lane_seq = h;
    IF NOT FOUND OR st IN ('succeeded', 'cancelled') THEN
        RETURN oncebox.lane_advance(p_lane, h, 'cancelled', true);
    END IF;
    UPDATE oncebox.outbox SET available_at = now()
    WHERE intent_id = iid AND phase = 'deliver' AND available_at = 'infinity';
    RETURN CASE WHEN FOUND THEN h END;
END $$;
