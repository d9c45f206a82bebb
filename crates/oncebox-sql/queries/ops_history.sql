-- Ops: the retry report of one intent, in order.
SELECT attempt, epoch, worker, phase, started_at, finished_at, outcome, status_code, error_code, detail
FROM oncebox.attempts WHERE intent_id = $1 ORDER BY id
