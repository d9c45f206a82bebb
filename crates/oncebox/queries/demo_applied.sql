-- Events the inbox consumer applied, counted once each.
SELECT count(DISTINCT message_id) FROM demo_events
