-- The approval requests of intents $1 (their ask rows claimed): how many approvals each needs
-- and when its window closes, as the "approval requested" message states them.
SELECT id, approvals_needed, approval_expires_at
FROM oncebox.intents
WHERE id = ANY ($1::bigint[]) AND status = 'awaiting_approval'
