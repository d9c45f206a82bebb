-- Outside the rolled-back transaction: one more failure of consumer $1 on message $2 (error $3);
-- returns how many so far, so that a poison message is rejected after a limit.
INSERT INTO oncebox_inbox.failures (consumer, message_id, count, last_error) VALUES ($1, $2, 1, $3)
ON CONFLICT (consumer, message_id) DO UPDATE
SET count = oncebox_inbox.failures.count + 1, last_error = $3, updated_at = now()
RETURNING count
