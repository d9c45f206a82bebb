-- Retention: forget the messages consumer $1 applied more than $2 seconds ago.
DELETE FROM oncebox_inbox.processed
WHERE consumer = $1 AND processed_at < now() - make_interval(secs => $2)
