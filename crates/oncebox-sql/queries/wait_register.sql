-- A worker is about to wait for work: submits will NOTIFY while this row is fresh.
INSERT INTO oncebox.waiting_workers (worker) VALUES ($1)
ON CONFLICT (worker) DO UPDATE SET seen_at = now()
