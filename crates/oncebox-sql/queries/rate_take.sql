-- Rate limits (pool-wide token buckets) of several destinations in one statement: takes up to
-- $2[i] tokens of destination $1[i], refilled at $3[i] a second up to $4[i] (the burst), none
-- while a Retry-After slows it. Buckets are locked in the destinations' order, so two workers
-- taking for overlapping sets cannot deadlock. The first take of a destination creates its
-- bucket full, which this statement cannot see yet: it returns no row for it (take again).
-- Returns, per destination found, how many were taken and the seconds until more may go.
WITH want AS (
    SELECT * FROM unnest($1::text[], $2::int[], $3::float8[], $4::float8[])
        AS w(destination, n, per_second, burst)
), ensure AS (
    INSERT INTO oncebox.destination_rate (destination, tokens)
    SELECT destination, burst FROM want ORDER BY destination
    ON CONFLICT (destination) DO NOTHING
), cur AS (
    SELECT r.destination, w.n, w.per_second,
           least(w.burst, r.tokens
                 + extract(epoch FROM now() - r.refilled_at)::float8 * w.per_second) AS avail,
           coalesce(r.slowed_until > now(), false) AS slowed,
           coalesce(extract(epoch FROM r.slowed_until - now())::float8, 0) AS slowed_for
    FROM oncebox.destination_rate r JOIN want w USING (destination)
    ORDER BY r.destination
    FOR UPDATE OF r
), taken AS (
    SELECT destination, per_second, avail, slowed, slowed_for,
           CASE WHEN slowed THEN 0 ELSE least(n::float8, floor(avail))::int END AS n
    FROM cur
)
UPDATE oncebox.destination_rate r
SET tokens = t.avail - t.n, refilled_at = now()
FROM taken t
WHERE r.destination = t.destination
RETURNING r.destination, t.n,
          CASE WHEN t.slowed THEN t.slowed_for
               ELSE greatest(0, 1 - (t.avail - t.n)) / t.per_second END AS wait_seconds
