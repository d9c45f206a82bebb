-- Ops cancel, first step (the intent locked): the deliver row of intent $1 unless it is leased
-- and its lease still runs; NOWAIT, so a worker claiming it right now is an error (55P03) rather
-- than a wait. A row returned with a lease owner, or with dispatched_at set, may be in flight.
SELECT lease_owner, dispatched_at FROM oncebox.outbox
WHERE intent_id = $1 AND phase = 'deliver' AND (lease_owner IS NULL OR lease_expires_at > now())
FOR UPDATE NOWAIT
