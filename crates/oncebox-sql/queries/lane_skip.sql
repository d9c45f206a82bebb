-- Ops: an operator skips intent $1, the head of its lane that ended failed, expired or
-- needs_review (locked by ops_lock.sql first): the lane moves on to the next intent. Returns the
-- new head's number, or null when the intent is not its lane's head.
SELECT oncebox.lane_advance(lane_id, lane_seq, status, true) AS head
FROM oncebox.intents WHERE id = $1 AND lane_id IS NOT NULL
