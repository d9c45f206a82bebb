-- Console overview: tenant $1's deliver rows ready and unleased (counted up to 100,000) and
-- the age in seconds of the oldest.
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM oncebox.outbox o JOIN oncebox.intents i ON i.id = o.intent_id
            WHERE o.phase = 'deliver' AND o.lease_owner IS NULL AND o.available_at <= now()
              AND i.tenant_id = $1
            LIMIT 100000) r) AS depth,
       coalesce((SELECT extract(epoch FROM now() - min(o.available_at))::float8
                 FROM oncebox.outbox o JOIN oncebox.intents i ON i.id = o.intent_id
                 WHERE o.phase = 'deliver' AND o.lease_owner IS NULL AND o.available_at <= now()
                   AND i.tenant_id = $1), 0) AS oldest_seconds
