-- Circuit breakers: every destination's state, failure run, probe time (and the seconds until
-- it, negative once passed) and reason, as workers cache them and `oncebox ops destinations`
-- lists them.
SELECT destination, state, failures, probe_at,
       extract(epoch FROM probe_at - now())::float8 AS probe_in_seconds, reason, updated_at
FROM oncebox.destination_state
ORDER BY destination
