-- Gauges: how many deliver rows are ready and unleased (a count capped at 100,000 over the
-- ready index, so a huge backlog does not make the gauge a full scan) and the age in seconds of
-- the oldest one.
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM oncebox.outbox
            WHERE phase = 'deliver' AND lease_owner IS NULL AND available_at <= now()
            LIMIT 100000) r) AS depth,
       coalesce((SELECT extract(epoch FROM now() - min(available_at))::float8
                 FROM oncebox.outbox
                 WHERE phase = 'deliver' AND lease_owner IS NULL AND available_at <= now()), 0)
         AS oldest_seconds
