-- Tokens live for a while and leave a trace: an optional expiry, and when each was last used
-- (to within a minute: authentication writes it at most once a minute per token, never once per
-- request). Revocation by label finds live tokens by their label.
ALTER TABLE oncebox.api_tokens
    ADD COLUMN expires_at   timestamptz,
    ADD COLUMN last_used_at timestamptz;
CREATE INDEX api_tokens_live_label ON oncebox.api_tokens (label) WHERE revoked_at IS NULL;
