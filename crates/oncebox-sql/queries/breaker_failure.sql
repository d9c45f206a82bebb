-- Circuit breaker: destination $1 failed once more (transport, timeout or 5xx). The run of
-- failures grows; reaching $2 opens the breaker until $3 seconds from now; a failed probe
-- (half_open) opens it again at once. A disabled destination stays disabled. Returns the state.
INSERT INTO oncebox.destination_state AS d (destination, state, failures, probe_at)
VALUES ($1, CASE WHEN 1 >= $2 THEN 'open' ELSE 'closed' END, 1,
        CASE WHEN 1 >= $2 THEN now() + make_interval(secs => $3) END)
ON CONFLICT (destination) DO UPDATE SET
    failures = d.failures + 1,
    state = CASE
        WHEN d.state = 'disabled' THEN 'disabled'
        WHEN d.state = 'half_open' OR d.failures + 1 >= $2 THEN 'open'
        ELSE d.state END,
    probe_at = CASE
        WHEN d.state = 'disabled' THEN d.probe_at
        WHEN d.state = 'open' THEN d.probe_at
        WHEN d.state = 'half_open' OR d.failures + 1 >= $2 THEN now() + make_interval(secs => $3)
        ELSE d.probe_at END,
    updated_at = now()
RETURNING state
