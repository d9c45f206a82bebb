-- Between the signing benchmark's drains: empty the journal and its outbox and attempts, so that
-- every drain starts from the same state with the same keys.
TRUNCATE oncebox.outbox, oncebox.attempts, oncebox.held_arguments, oncebox.audit, oncebox.intents
