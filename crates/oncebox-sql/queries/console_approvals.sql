-- Console "Awaiting approval": tenant $1's intents awaiting approval, oldest first, at most $2,
-- each with the approvals recorded so far, how many it needs and when its window closes. Over
-- the intents_awaiting_approval index. Also the approval state of one intent ($3, with $1
-- its tenant; null: all of the tenant's). A page after the first starts after the intent
-- created at $4 with id $5 (null: from the oldest).
SELECT i.*, (SELECT count(*) FROM oncebox.approvals a WHERE a.intent_id = i.id) AS approvals
FROM oncebox.intents i
WHERE i.status = 'awaiting_approval' AND i.tenant_id = $1
  AND ($3::bigint IS NULL OR i.id = $3)
  AND ($4::timestamptz IS NULL OR (i.created_at, i.id) > ($4::timestamptz, $5::bigint))
ORDER BY i.created_at, i.id
LIMIT $2
