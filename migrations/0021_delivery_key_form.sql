-- How each intent's delivery key is formed (oncebox_core::KeyForm): 0, the bare idempotency
-- key, as every intent written before this migration was sent; 1, the tenant-scoped form
-- (`TENANT:KEY`, or a digest of both), unique across tenants. The form is fixed when the intent
-- is written, so an upgrade never changes the key of an intent already on its way: existing
-- rows, and rows that writers of the previous release (which do not name the column) insert
-- while a rolling upgrade is under way, take the default, 0; this release's submit statements
-- write 1. Adding a column with a constant default rewrites nothing, and the CHECK is added
-- NOT VALID so that the journal is not scanned under the table's lock: every existing row holds
-- the default, and every new row is checked.
ALTER TABLE oncebox.intents ADD COLUMN key_form smallint NOT NULL DEFAULT 0;
ALTER TABLE oncebox.intents ADD CONSTRAINT intents_key_form_known
    CHECK (key_form IN (0, 1)) NOT VALID;
