-- Approvals: an intent whose action's approval policy matches its arguments is written
-- `awaiting_approval`, with how many distinct people must approve it and when it stops waiting.
-- Its deliver row is queued at that moment (available_at = approval_expires_at), so no claim
-- takes it before; a worker that takes it then expires it without sending anything. When the
-- last approval it needs is recorded, the deliver row is queued afresh, ready now (or parked
-- behind its ordering lane's head); a rejection ends it `rejected` and removes the row.

-- Rejected is terminal; awaiting_approval is settled (automation has nothing to do: a waiter
-- returns there, and a person moves it on), like needs_review. Neither is dead-lettered on
-- entry: an approval that never came ends `expired`, which is.
CREATE OR REPLACE FUNCTION oncebox.is_terminal(s oncebox.intent_status) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT s IN ('succeeded', 'failed', 'cancelled', 'expired', 'rejected') $$;

CREATE OR REPLACE FUNCTION oncebox.is_settled(s oncebox.intent_status) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT s IN ('succeeded', 'failed', 'cancelled', 'expired', 'rejected',
                       'needs_review', 'awaiting_approval') $$;

-- Nullable and without default: an intent without a policy stores only null bits.
ALTER TABLE oncebox.intents
    ADD COLUMN approvals_needed smallint,
    ADD COLUMN approval_expires_at timestamptz,
    -- Who submitted it, where oncebox knows (`token <id>` through the API or MCP): that
    -- identity may not approve it.
    ADD COLUMN submitted_by text,
    ADD CONSTRAINT intents_approval_whole
        CHECK ((approvals_needed IS NULL) = (approval_expires_at IS NULL)
               AND (approvals_needed IS NULL OR approvals_needed >= 1));

-- One row per person who approved an intent: one identity counts once.
CREATE TABLE oncebox.approvals (
    intent_id   bigint      NOT NULL REFERENCES oncebox.intents (id) ON DELETE CASCADE,
    approver    text        NOT NULL,       -- the actor: `token <id>`, or the CLI's user
    via         text        NOT NULL,       -- cli, api, console
    approved_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (intent_id, approver)
);

-- The audit log names an API token by its label too, for people reading who decided.
ALTER TABLE oncebox.audit ADD COLUMN label text;

-- Intents waiting for people, oldest first (the console's page, the gauge of the oldest).
CREATE INDEX intents_awaiting_approval ON oncebox.intents (tenant_id, created_at)
    WHERE status = 'awaiting_approval';

-- Lanes: a rejected head releases its lane as a cancelled one does (a person decided it will
-- never be sent), and the lane passes over a rejected intent. A head awaiting approval holds its
-- lane; when its turn comes it is queued for its approval window's end, not now.
CREATE OR REPLACE FUNCTION oncebox.lane_advance(p_lane bigint, p_from bigint,
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
      AND (p_force OR p_status IN ('succeeded', 'cancelled', 'rejected')
           OR (skip_failed AND oncebox.is_dead_letter(p_status)))
    RETURNING head_seq, last_seq INTO h, last;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    LOOP
        EXIT WHEN h > last;
        SELECT id, status INTO iid, st FROM oncebox.intents WHERE lane_id = p_lane AND lane_seq = h;
        IF FOUND AND st NOT IN ('succeeded', 'cancelled', 'rejected') THEN
            IF oncebox.lane_unpark(iid) AND EXISTS (
                    SELECT 1 FROM oncebox.waiting_workers
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

-- Queues intent `p_intent`, parked behind its lane's head, now that it is the head: ready now,
-- or at the end of its approval window while it awaits approval. True when it was parked.
CREATE FUNCTION oncebox.lane_unpark(p_intent bigint) RETURNS boolean LANGUAGE sql AS $$
    WITH unparked AS (
        UPDATE oncebox.outbox o
        SET available_at = CASE WHEN i.status = 'awaiting_approval'
                                THEN i.approval_expires_at ELSE now() END
        FROM oncebox.intents i
        WHERE i.id = p_intent AND o.intent_id = p_intent AND o.phase = 'deliver'
          AND o.available_at = 'infinity'
        RETURNING o.intent_id
    )
    SELECT EXISTS (SELECT 1 FROM unparked)
$$;

CREATE OR REPLACE FUNCTION oncebox.lane_repair(p_lane bigint) RETURNS bigint LANGUAGE plpgsql AS $$
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
    IF NOT FOUND OR st IN ('succeeded', 'cancelled', 'rejected') THEN
        RETURN oncebox.lane_advance(p_lane, h, 'cancelled', true);
    END IF;
    RETURN CASE WHEN oncebox.lane_unpark(iid) THEN h END;
END $$;
