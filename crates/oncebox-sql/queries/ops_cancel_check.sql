-- Ops cancel, first step (the intent locked): the deliver row of intent $1; NOWAIT, so a worker
-- claiming it right now is an error (55P03) rather than a wait. A row returned with a lease
-- holder (whether or not its lease still runs: a worker that died or stopped mid-call may have
-- sent it), or with dispatched_at set, may be in flight.
SELECT lease_owner, dispatched_at FROM oncebox.outbox
WHERE intent_id = $1 AND phase = 'deliver'
FOR UPDATE NOWAIT
