-- A phase of outbox work for approvals: `ask`, the "approval requested" message an action's
-- policy sends its `notify` destination. submit.sql writes one beside the deliver row of every
-- intent that starts awaiting_approval; a worker sends it (or, when the action names no notify
-- destination, or the intent was decided first, drops it) and deletes the row.
ALTER TYPE oncebox.phase ADD VALUE IF NOT EXISTS 'ask';
