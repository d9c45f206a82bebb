-- The consumer's business write for one event, in the inbox's transaction.
INSERT INTO demo_events (message_id, body) VALUES ($1, $2)
