-- Audit: one operator decision on intent $1 — by $2 (role $3, through $4, named $5 for people),
-- action $6, reason $7, status $8 before and $9 after — in the transaction that made it.
INSERT INTO oncebox.audit
    (intent_id, actor, role, via, label, action, reason, status_before, status_after)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
