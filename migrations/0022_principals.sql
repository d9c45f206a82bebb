-- Principals (oncebox_core::Principal): every submitter and every decision is recorded as an
-- identity some mechanism vouches for — `user:NAME` (a token's holder, or a name the writer
-- configured), `oidc:ISSUER#SUBJECT` (a person signed in to the console through OpenID
-- Connect), `token:ID` (a token issued without a holder) or `db:ROLE` (the database role a
-- library submit ran under, when it named no principal).

-- Tokens name the person or service they were issued to: every token of one holder is one
-- principal, so a person with two tokens counts once among the approvers.
ALTER TABLE oncebox.api_tokens ADD COLUMN holder text
    CHECK (holder IS NULL OR (length(holder) BETWEEN 1 AND 255 AND holder = btrim(holder)));

-- A console session is a token's, or a person's signed in through OpenID Connect, who holds
-- no token: their principal, e-mail (for people reading), tenant and role, from the provider's
-- groups as the configuration maps them.
ALTER TABLE oncebox.console_sessions
    ALTER COLUMN token_id DROP NOT NULL,
    ADD COLUMN principal text,
    ADD COLUMN email text,
    ADD COLUMN tenant_id text,
    ADD COLUMN role oncebox.token_role,
    ADD CONSTRAINT console_sessions_who
        CHECK (token_id IS NOT NULL
               OR (principal IS NOT NULL AND tenant_id IS NOT NULL AND role IS NOT NULL));

-- An OpenID Connect sign-in is a login form too: its CSRF token is the `state` sent to the
-- provider, kept with the `nonce` and the PKCE verifier, taken once when the provider sends
-- the person back.
ALTER TABLE oncebox.console_logins
    ADD COLUMN nonce text,
    ADD COLUMN pkce_verifier text;

-- The previous release named an API token `token <id>`; the same token is now `token:<id>`
-- (when it has no holder). Rewritten where it still decides something: the approvals recorded
-- and the submitter of every intent still awaiting approval (over intents_awaiting_approval).
UPDATE oncebox.approvals SET approver = 'token:' || substr(approver, 7)
WHERE approver ~ '^token [0-9]+$';
UPDATE oncebox.intents SET submitted_by = 'token:' || substr(submitted_by, 7)
WHERE status = 'awaiting_approval' AND submitted_by ~ '^token [0-9]+$';
