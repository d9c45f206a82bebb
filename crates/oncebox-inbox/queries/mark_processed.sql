-- In the consumer's transaction: record that consumer $1 applies message $2. Nothing returned
-- means it was applied before: a redelivery, to be acked without running the handler again.
INSERT INTO oncebox_inbox.processed (consumer, message_id) VALUES ($1, $2)
ON CONFLICT DO NOTHING
RETURNING 1
