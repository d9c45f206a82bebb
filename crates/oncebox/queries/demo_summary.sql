-- What the demo counts at the end: journal and outbox rows, business rows, orders without their
-- intent, payloads still holding an email in clear, and the retry report by kind.
SELECT (SELECT count(*) FROM oncebox.intents) AS journal,
       (SELECT count(*) FROM oncebox.outbox) AS outbox,
       (SELECT count(*) FROM demo_orders) AS orders,
       (SELECT count(*) FROM demo_orders o
         WHERE NOT EXISTS (SELECT 1 FROM oncebox.intents i
                           WHERE i.idempotency_key = o.invoice_key)) AS orphans,
       (SELECT count(*) FROM oncebox.intents WHERE payload::text LIKE '%@example.com%') AS unredacted,
       (SELECT count(*) FROM oncebox.attempts) AS attempts,
       (SELECT count(*) FROM oncebox.attempts WHERE outcome = 'unknown') AS unknown_attempts,
       (SELECT count(*) FROM oncebox.attempts WHERE outcome = 'retry_before_execution') AS busy_attempts,
       (SELECT count(*) FROM oncebox.attempts WHERE outcome = 'lookup_found') AS reconciled
