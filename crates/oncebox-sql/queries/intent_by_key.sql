-- One intent by its tenant and idempotency key (the journal's unique key). Through a function
-- that plans the lookup on every call, so that no cached plan made on an empty journal scans
-- it whole once it has grown (migration 0020).
SELECT * FROM oncebox.intent_by_key($1, $2)
