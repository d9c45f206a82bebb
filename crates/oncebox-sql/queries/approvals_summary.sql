-- Console: how many of tenant $1's intents await approval, and when the first of their windows
-- closes (over the intents_awaiting_approval index).
SELECT count(*) AS waiting, min(approval_expires_at) AS first_expiry
FROM oncebox.intents
WHERE status = 'awaiting_approval' AND tenant_id = $1
