-- Rate limit: destination $1 answered 429 or 503 with Retry-After: no worker sends to it for $2
-- seconds (a later pause already set is kept).
INSERT INTO oncebox.destination_rate AS r (destination, tokens, slowed_until)
VALUES ($1, 0, now() + make_interval(secs => $2))
ON CONFLICT (destination) DO UPDATE SET
    slowed_until = greatest(coalesce(r.slowed_until, now()), now() + make_interval(secs => $2))
