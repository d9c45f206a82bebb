-- Ops reject (the intent locked and checked by ops_approval_check.sql): intent $1 ends
-- rejected — a terminal status; its ordering lane, if any, moves on — and its deliver row is
-- removed, with its approval request if still unsent: nothing is ever sent. Waiters on
-- channel $2 hear of it at commit.
WITH intent AS (
    UPDATE oncebox.intents
    SET status = 'rejected', updated_at = now(), completed_at = now()
    WHERE id = $1
    RETURNING id
), removed AS (
    DELETE FROM oncebox.outbox o USING intent
    WHERE o.intent_id = intent.id AND o.phase IN ('deliver', 'ask')
)
SELECT pg_notify($2, '')
