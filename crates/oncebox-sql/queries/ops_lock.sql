-- Ops: the intent $1, locked for the rest of the operator's transaction, so that no worker's
-- record and no other operator can change it meanwhile.
SELECT * FROM oncebox.intents WHERE id = $1 FOR UPDATE
