-- Workers seen: worker $1 is alive (and claims deliveries: $2), upserted with its gauges every
-- few seconds; workers not heard from for a day are forgotten in the same statement. Returns
-- how many workers that claim deliveries were seen in the last 15 seconds, this one included:
-- each worker scales its own claim rate by it to judge the pool's (the wake-up policy).
WITH gone AS (
    DELETE FROM oncebox.workers WHERE seen_at < now() - interval '1 day' AND worker <> $1
), seen AS (
    INSERT INTO oncebox.workers (worker, delivers) VALUES ($1, $2)
    ON CONFLICT (worker) DO UPDATE SET seen_at = now(), delivers = EXCLUDED.delivers
)
SELECT (SELECT count(*) FROM oncebox.workers
        WHERE delivers AND seen_at > now() - interval '15 seconds' AND worker <> $1)
       + CASE WHEN $2 THEN 1 ELSE 0 END AS delivering
