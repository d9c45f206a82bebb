-- Circuit breaker: disables destination $1 (a 410 Gone, or an operator) with reason $2, until
-- an operator enables it.
INSERT INTO oncebox.destination_state AS d (destination, state, reason)
VALUES ($1, 'disabled', $2)
ON CONFLICT (destination) DO UPDATE SET
    state = 'disabled', reason = $2, probe_at = NULL, updated_at = now()
RETURNING state
