-- Console overview: tenant $1's intents completed per minute over the last hour, by status
-- (minutes ago, 0 = this minute), over the intents_completed index.
SELECT floor(extract(epoch FROM now() - completed_at) / 60)::int AS minutes_ago,
       status, count(*) AS n
FROM oncebox.intents
WHERE completed_at IS NOT NULL AND completed_at > now() - interval '60 minutes'
  AND tenant_id = $1
GROUP BY 1, 2
