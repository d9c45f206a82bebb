-- Two statuses for approvals: `awaiting_approval` (accepted, held until enough people approve
-- it) and `rejected` (a person said no; terminal, never sent). A label added to an enum cannot
-- be used in the transaction that adds it, so the functions and tables that use them come in
-- the next migration.
ALTER TYPE oncebox.intent_status ADD VALUE IF NOT EXISTS 'awaiting_approval' BEFORE 'pending';
ALTER TYPE oncebox.intent_status ADD VALUE IF NOT EXISTS 'rejected' AFTER 'expired';
