-- Workers seen (the console's overview): each worker, when it started and when it was last
-- heard from, with the seconds since, most recently seen first.
SELECT worker, delivers, started_at, seen_at,
       extract(epoch FROM now() - seen_at)::float8 AS seen_seconds_ago
FROM oncebox.workers
ORDER BY seen_at DESC, worker
LIMIT 200
