-- Rows left in the raw baseline's outbox.
SELECT count(*) FROM baseline_outbox
