-- Whether phase $1 has rows a claim of it could take, now or later: an unleased row (ready or
-- not yet: the first entry of the ready index for the phase), or a leased row whose lease
-- expired. A loop whose last claim found nothing asks this before claiming again: it plans in a
-- tenth of the time the claim takes to plan (the claim is planned for every call on the pool),
-- and when it says no, no claim of the phase could have taken anything.
SELECT EXISTS (
           SELECT 1 FROM oncebox.outbox
           WHERE phase = $1 AND lease_owner IS NULL)
    OR EXISTS (
           SELECT 1 FROM oncebox.outbox
           WHERE lease_owner IS NOT NULL AND lease_expires_at < now() AND phase = $1)
