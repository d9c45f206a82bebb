-- Audit: one operator decision on intent $1 — by $2 (role $3, through $4), action $5, reason $6,
-- status $7 before and $8 after — in the transaction that made it.
INSERT INTO oncebox.audit (intent_id, actor, role, via, action, reason, status_before, status_after)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
