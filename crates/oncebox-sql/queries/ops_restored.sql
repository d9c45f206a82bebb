-- Ops, after restoring a backup (before any worker starts): every queued delivery may have been
-- sent after the backup was taken, so each is marked dispatched. Workers then treat it as an
-- unknown outcome — looked up first, re-sent with its key, or handed to a person, per its
-- destination's idempotency mode — instead of sending it blind. Returns the rows marked.
UPDATE oncebox.outbox
SET dispatched_at = now()
WHERE phase = 'deliver' AND dispatched_at IS NULL
