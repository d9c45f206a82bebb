-- Outbox rows left (the backlog drains to zero).
SELECT count(*) FROM oncebox.outbox
