-- Circuit breaker: destination $1 answered. Closes it and ends its run of failures, unless an
-- operator or a 410 disabled it. Writes nothing when it was already closed with no failures.
UPDATE oncebox.destination_state
SET state = 'closed', failures = 0, probe_at = NULL, reason = NULL, updated_at = now()
WHERE destination = $1 AND state <> 'disabled' AND (state <> 'closed' OR failures > 0)
RETURNING state
