-- Lanes: the repair sweep each worker runs every few seconds (oncebox.lane_repair, migration
-- 0011): lanes with work whose head is not a live intent with its delivery unparked — a number
-- left without an intent by a racing replay, or a head still parked — are looked at again under
-- their lock and moved on or unparked. Lanes being submitted to are skipped (SKIP LOCKED inside
-- the function). Returns how many were repaired.
SELECT count(*) AS repaired FROM (
    SELECT oncebox.lane_repair(l.id) AS head
    FROM oncebox.lanes l
    WHERE l.head_seq <= l.last_seq
      AND NOT EXISTS (
        SELECT 1 FROM oncebox.intents i
        LEFT JOIN oncebox.outbox o ON o.intent_id = i.id AND o.phase = 'deliver'
        WHERE i.lane_id = l.id AND i.lane_seq = l.head_seq
          AND i.status NOT IN ('succeeded', 'cancelled', 'rejected')
          AND (o.available_at IS NULL OR o.available_at <> 'infinity'))
) r
WHERE head IS NOT NULL
