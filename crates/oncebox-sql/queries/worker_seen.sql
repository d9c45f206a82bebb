-- Workers seen: worker $1 is alive (and claims deliveries: $2), upserted with its gauges every
-- few seconds; workers not heard from for a day are forgotten in the same statement.
WITH gone AS (
    DELETE FROM oncebox.workers WHERE seen_at < now() - interval '1 day' AND worker <> $1
)
INSERT INTO oncebox.workers (worker, delivers) VALUES ($1, $2)
ON CONFLICT (worker) DO UPDATE SET seen_at = now(), delivers = EXCLUDED.delivers
