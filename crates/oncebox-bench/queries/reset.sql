-- Between measurements: empty oncebox's tables and the baseline's, and checkpoint, so that every
-- case starts from the same state.
TRUNCATE oncebox.outbox, oncebox.attempts, oncebox.held_arguments, oncebox.audit, oncebox.approvals,
         oncebox.intents,
         oncebox.waiting_workers,
         baseline_outbox, baseline_journal;
CHECKPOINT;
