-- Between the signing and lanes benchmarks' drains: empty the journal and its outbox, attempts
-- and ordering lanes, so that every drain starts from the same state with the same keys.
TRUNCATE oncebox.outbox, oncebox.attempts, oncebox.held_arguments, oncebox.audit, oncebox.approvals,
         oncebox.intents,
         oncebox.lanes
