-- Ops: ordering lanes with work — their head running, waiting or blocked — of tenant $1 when it
-- is not null, only the blocked ones (head ended failed, expired or needs_review) when $2, at
-- most $3, blocked first and then the longest waiting. `queued` counts the lane's numbers from
-- its head on: an upper bound of the intents still to go (a cancelled one keeps its number).
SELECT l.tenant_id, l.destination, l.ordering_key, l.last_seq - l.head_seq + 1 AS queued,
       l.skip_failed, h.id AS head_id, h.idempotency_key AS head_key, h.status AS head_status,
       coalesce(h.updated_at, l.updated_at) AS since,
       coalesce(oncebox.is_dead_letter(h.status), false) AS blocked
FROM oncebox.lanes l
LEFT JOIN oncebox.intents h ON h.lane_id = l.id AND h.lane_seq = l.head_seq
WHERE l.head_seq <= l.last_seq
  AND ($1::text IS NULL OR l.tenant_id = $1::text)
  AND (NOT $2::boolean OR coalesce(oncebox.is_dead_letter(h.status), false))
ORDER BY blocked DESC, since, l.id
LIMIT $3
