-- Ops approve or reject, first step (the intent locked by ops_lock.sql): for intent $1, the
-- deliver row's holder (NOWAIT, so a worker claiming it right now is an error, 55P03, not a
-- wait), whether its approval window has closed, who submitted it, how many approvals it needs
-- and has, and whether $2 already approved it. A worker holds the row of an intent awaiting
-- approval only to expire it: its window closed.
SELECT (SELECT lease_owner FROM oncebox.outbox
        WHERE intent_id = i.id AND phase = 'deliver' FOR UPDATE NOWAIT) AS holder,
       i.approval_expires_at <= now() AS window_closed,
       i.approval_expires_at, i.submitted_by, i.approvals_needed,
       (SELECT count(*) FROM oncebox.approvals a WHERE a.intent_id = i.id) AS approvals,
       EXISTS (SELECT 1 FROM oncebox.approvals a
               WHERE a.intent_id = i.id AND a.approver = $2) AS approved_already
FROM oncebox.intents i
WHERE i.id = $1
