-- Fairness between tenants (issue 17): a tenant with a large backlog must not starve another.
-- The claim took ready rows in available_at order alone, so 20,000 rows of one tenant went out
-- before a row another tenant submitted a moment later. Each outbox row now carries its intent's
-- tenant, and the ready index is ordered by tenant within a phase: the claim (claim.sql) visits
-- the tenants that have ready rows (a skip scan, one index descent per tenant) and gives each an
-- equal share of the batch, oldest rows first within a tenant and round by round across them.
-- A single tenant's claim is what it was: the whole batch, oldest first.
--
-- The tenant is copied from the journal, which never changes it. Building the index locks the
-- outbox against writes for as long as it takes: run it while the outbox is small (it holds
-- only work not yet done).
ALTER TABLE oncebox.outbox ADD COLUMN tenant_id text;
UPDATE oncebox.outbox o SET tenant_id = i.tenant_id FROM oncebox.intents i WHERE i.id = o.intent_id;
-- An outbox row without its intent (never written by oncebox) would be claimed by no one: drop it.
DELETE FROM oncebox.outbox WHERE tenant_id IS NULL;
ALTER TABLE oncebox.outbox ALTER COLUMN tenant_id SET NOT NULL;

-- Binaries older than this migration write outbox rows without a tenant (a rolling upgrade runs
-- them beside the new ones): the journal supplies it. This release's statements always name the
-- tenant, so for them the WHEN clause is false and the function never runs.
CREATE FUNCTION oncebox.outbox_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    SELECT tenant_id INTO NEW.tenant_id FROM oncebox.intents WHERE id = NEW.intent_id;
    RETURN NEW;
END $$;

CREATE TRIGGER outbox_tenant BEFORE INSERT ON oncebox.outbox
    FOR EACH ROW WHEN (NEW.tenant_id IS NULL) EXECUTE FUNCTION oncebox.outbox_tenant();

DROP INDEX oncebox.outbox_ready;
CREATE INDEX outbox_ready ON oncebox.outbox (phase, tenant_id, available_at)
    WHERE lease_owner IS NULL;
