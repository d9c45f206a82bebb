-- The audit log: every operator decision — retry, resolve, cancel — from the CLI, the HTTP API
-- or the MCP gateway, written by oncebox_store::ops in the same transaction as the change it
-- describes: who (a token or the OS user), in what role and through what, which intent, why,
-- and its status before and after. Purged only with the intent it describes (the cascade).
CREATE TABLE oncebox.audit (
    id            bigserial PRIMARY KEY,
    intent_id     bigint NOT NULL REFERENCES oncebox.intents (id) ON DELETE CASCADE,
    at            timestamptz NOT NULL DEFAULT now(),
    actor         text NOT NULL,
    role          text NOT NULL,
    via           text NOT NULL,
    action        text NOT NULL,
    reason        text,
    status_before oncebox.intent_status NOT NULL,
    status_after  oncebox.intent_status NOT NULL
);
CREATE INDEX audit_by_intent ON oncebox.audit (intent_id, id);
CREATE INDEX audit_by_time ON oncebox.audit (at, id);
