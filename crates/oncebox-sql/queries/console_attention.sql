-- Console "Needs a person": tenant $1's intents in statuses $2 (a subset of unknown,
-- needs_review, failed, expired), of actions $3 (all when null), unchanged for $4 seconds (any
-- age when null), paged by keyset after ($5 updated_at, $6 id): newest first when $7, oldest
-- first otherwise; at most $8. Over the intents_waiting index.
SELECT * FROM oncebox.intents
WHERE status IN ('unknown', 'reconciling', 'needs_review', 'failed', 'expired')
  AND status::text = ANY($2::text[])
  AND tenant_id = $1
  AND ($3::text[] IS NULL OR action = ANY($3))
  AND ($4::float8 IS NULL OR updated_at < now() - make_interval(secs => $4))
  AND ($5::timestamptz IS NULL
       OR ($7 AND (updated_at, id) < ($5, $6))
       OR (NOT $7 AND (updated_at, id) > ($5, $6)))
ORDER BY CASE WHEN $7 THEN updated_at END DESC, CASE WHEN $7 THEN id END DESC,
         updated_at, id
LIMIT $8
