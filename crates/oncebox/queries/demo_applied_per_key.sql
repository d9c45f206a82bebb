-- How many times each event was applied (once, if the inbox does its job).
SELECT message_id, count(*) FROM demo_events GROUP BY message_id
