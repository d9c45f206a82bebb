-- Workers registered as waiting (idle, listening): each latency point starts once all are.
SELECT count(*) FROM oncebox.waiting_workers WHERE seen_at > now() - interval '1 minute'
