-- Circuit breaker: an operator enables destination $1 again: closed, no failures.
INSERT INTO oncebox.destination_state AS d (destination, state)
VALUES ($1, 'closed')
ON CONFLICT (destination) DO UPDATE SET
    state = 'closed', failures = 0, probe_at = NULL, reason = NULL, updated_at = now()
RETURNING state
