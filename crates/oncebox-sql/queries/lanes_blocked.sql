-- Gauges: lanes whose head ended failed, expired or needs_review and blocks them (ordering
-- lanes, migration 0011), over the busy lanes only.
SELECT count(*) AS blocked
FROM oncebox.lanes l
JOIN oncebox.intents h ON h.lane_id = l.id AND h.lane_seq = l.head_seq
WHERE l.head_seq <= l.last_seq AND oncebox.is_dead_letter(h.status)
