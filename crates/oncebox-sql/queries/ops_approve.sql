-- Ops approve (the intent locked and checked by ops_approval_check.sql): $2 approves intent $1
-- through $3 (the reason and the token's label go to the audit log). When that makes as many
-- approvals as the intent needs, it becomes pending and its deliver row is queued afresh, with
-- its fencing epoch: ready now, or still parked behind its ordering lane's head. Afresh —
-- deleted and inserted, not updated — so that a claim whose snapshot predates this commit, and
-- so still reads the intent as awaiting approval, finds its row gone rather than taking it to
-- expire it. An approval request still unsent is dropped. Waiters on channel $4 and waiting workers on channel $5 hear of it at commit.
-- Returns the approvals recorded (the caller reads the intent's status again).
WITH approval AS (
    INSERT INTO oncebox.approvals (intent_id, approver, via)
    VALUES ($1, $2, $3)
    RETURNING intent_id
), counted AS (
    SELECT i.id, i.approvals_needed,
           (SELECT count(*) FROM oncebox.approvals a WHERE a.intent_id = i.id) + 1 AS approvals
    FROM oncebox.intents i JOIN approval ON approval.intent_id = i.id
), released AS (
    UPDATE oncebox.intents i
    SET status = 'pending', updated_at = now()
    FROM counted
    WHERE i.id = counted.id AND counted.approvals >= counted.approvals_needed
    RETURNING i.id
), old AS (
    DELETE FROM oncebox.outbox o USING released
    WHERE o.intent_id = released.id AND o.phase = 'deliver'
    RETURNING o.intent_id, o.tenant_id, o.arguments, o.available_at, o.epoch
), unasked AS (
    DELETE FROM oncebox.outbox o USING released
    WHERE o.intent_id = released.id AND o.phase = 'ask'
), queued AS (
    INSERT INTO oncebox.outbox (intent_id, phase, tenant_id, arguments, epoch, available_at)
    SELECT intent_id, 'deliver'::oncebox.phase, tenant_id, arguments, epoch,
           CASE WHEN available_at = 'infinity' THEN 'infinity'::timestamptz ELSE now() END
    FROM old
    RETURNING available_at
)
SELECT c.approvals
FROM counted c
CROSS JOIN (SELECT pg_notify($4, '')) waiters
LEFT JOIN LATERAL (SELECT pg_notify($5, 'deliver') FROM queued
                   WHERE queued.available_at <> 'infinity') workers ON true
