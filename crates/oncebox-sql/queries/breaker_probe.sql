-- Circuit breaker: claims the one probe of open destination $1 once its cool-down passed (or a
-- probe's time ran out without an answer): half_open until $2 seconds from now. A row back means
-- this worker sends the probe; none means another one does, or it is not time yet.
UPDATE oncebox.destination_state
SET state = 'half_open', probe_at = now() + make_interval(secs => $2), updated_at = now()
WHERE destination = $1 AND state IN ('open', 'half_open') AND probe_at <= now()
RETURNING destination
