-- The web console and the ops gauges.
--
-- intents_waiting: intents that wait for reconciliation or a person, or ended failed or expired —
-- what the console's "Needs a person" page lists and the workers' waiting gauges count, by age,
-- without scanning the journal. A partial index: intents that succeed or are cancelled (nearly
-- all) never enter it. Its predicate names status, so a status change is not a HOT update; the
-- only such change that was one before is `pending -> in_flight` for destinations that do not
-- honour keys.
CREATE INDEX intents_waiting ON oncebox.intents (updated_at, id)
    WHERE status IN ('unknown', 'reconciling', 'needs_review', 'failed', 'expired');

-- Console sessions: an ops token exchanged at login for a random session id held in an HttpOnly
-- cookie. Only the id's SHA-256 is stored, with the per-session CSRF token every form carries.
-- A session ends at logout, at its expiry, or when its token is revoked or expires (the cascade
-- and the join at every request).
CREATE TABLE oncebox.console_sessions (
    id_hash    text        PRIMARY KEY CHECK (id_hash ~ '^[0-9a-f]{64}$'),
    token_id   bigint      NOT NULL REFERENCES oncebox.api_tokens (id) ON DELETE CASCADE,
    csrf       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX console_sessions_expiry ON oncebox.console_sessions (expires_at);

-- Workers seen: each worker process upserts its row every few seconds (with its gauges), so the
-- console can show which workers run and when each was last heard from. Rows of workers not
-- seen for a day are removed by the workers themselves.
CREATE TABLE oncebox.workers (
    worker     text        PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    delivers   boolean     NOT NULL
);
