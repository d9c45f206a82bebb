-- What one size of the scale benchmark spread its intents over, after the drain: the ordering
-- lanes the lane table holds (those the backlog used and the idle ones beyond them), and the
-- actions (one per destination along the destinations axis) of the intents that succeeded.
SELECT (SELECT count(*) FROM oncebox.lanes) AS lanes,
       (SELECT count(DISTINCT action) FROM oncebox.intents WHERE status = 'succeeded')
           AS destinations
