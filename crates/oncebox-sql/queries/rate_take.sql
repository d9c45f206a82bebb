-- Rate limit (pool-wide token bucket): takes up to $2 tokens of destination $1, refilled at $3 a
-- second up to $4 (the burst), none while a Retry-After slows it. The first take creates the
-- bucket full. Returns how many were taken and the seconds until more may go.
WITH ensure AS (
    INSERT INTO oncebox.destination_rate (destination, tokens) VALUES ($1, $4)
    ON CONFLICT (destination) DO NOTHING
), cur AS (
    SELECT least($4::float8, tokens + extract(epoch FROM now() - refilled_at)::float8 * $3)
               AS avail,
           coalesce(slowed_until > now(), false) AS slowed,
           coalesce(extract(epoch FROM slowed_until - now())::float8, 0) AS slowed_for
    FROM oncebox.destination_rate WHERE destination = $1 FOR UPDATE
), taken AS (
    SELECT CASE WHEN slowed THEN 0 ELSE least($2::float8, floor(avail))::int END AS n,
           avail, slowed, slowed_for
    FROM cur
)
UPDATE oncebox.destination_rate r
SET tokens = t.avail - t.n, refilled_at = now()
FROM taken t
WHERE r.destination = $1
RETURNING t.n,
          CASE WHEN t.slowed THEN t.slowed_for
               ELSE greatest(0, 1 - (t.avail - t.n)) / $3 END AS wait_seconds
