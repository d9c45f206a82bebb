-- oncebox schema, version 1: the journal, the outbox, the retry report and API tokens.
-- Forward-only: later changes are new numbered files, never edits of this one.

CREATE SCHEMA IF NOT EXISTS oncebox;

-- The journal: one row per (tenant, idempotency key), for ever (until retention purge).
CREATE TABLE oncebox.intents (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id          text        NOT NULL,
    idempotency_key    text        NOT NULL,
    action             text        NOT NULL,
    request_hash       text        NOT NULL CHECK (length(request_hash) = 64),
    payload            jsonb       NOT NULL,                 -- arguments after redaction
    status             text        NOT NULL DEFAULT 'pending',
    attempt_count      integer     NOT NULL DEFAULT 0 CHECK (attempt_count >= 0),
    external_reference text,
    response           jsonb,
    last_error         jsonb,                                -- {"code", "detail", "status_code"}
    run_id             text,
    business_ref       text,
    step               text,
    deadline           timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    completed_at       timestamptz,
    CONSTRAINT intents_tenant_key UNIQUE (tenant_id, idempotency_key),
    -- Full key syntax is checked by oncebox before insert; a regex here costs ~8% of intake.
    CONSTRAINT intents_key_length CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    CONSTRAINT intents_status CHECK (status IN ('pending', 'in_flight', 'unknown', 'reconciling',
        'needs_review', 'succeeded', 'failed', 'cancelled', 'expired')),
    CONSTRAINT intents_completed_iff_terminal CHECK (
        (completed_at IS NOT NULL) = (status IN ('succeeded', 'failed', 'cancelled', 'expired')))
);

-- Purge: terminal intents by completion time. (Every index here is paid by every submit: ops
-- queries add theirs when they exist, measured against the intake benchmark.)
CREATE INDEX intents_completed ON oncebox.intents (completed_at)
    WHERE completed_at IS NOT NULL;

-- The outbox: work to do, small and hot. A row is deleted when its work is done. A row is named
-- by its intent and phase: at most one of each per intent, enforced by the primary key with no
-- second index or sequence on the hot path (a dead-letter notification per intent is enough:
-- its message id is "dlq:" + key, deduplicated downstream). A delivery that becomes a
-- reconciliation changes its phase in place. No foreign key to intents: rows are written only
-- with their intent (submit) or by workers holding it, and the check would cost ~13% of intake;
-- purge deletes the outbox rows of the intents it removes.
CREATE TABLE oncebox.outbox (
    intent_id        bigint      NOT NULL,
    phase            text        NOT NULL CHECK (phase IN ('deliver', 'reconcile', 'notify')),
    available_at     timestamptz NOT NULL DEFAULT now(),
    lease_owner      text,
    lease_expires_at timestamptz,
    epoch            bigint      NOT NULL DEFAULT 0,         -- fencing token, +1 on every claim
    dispatched_at    timestamptz,                            -- the request may have left
    attempt          integer     NOT NULL DEFAULT 0,
    arguments        jsonb,      -- unredacted arguments, only when redaction changed them
    PRIMARY KEY (intent_id, phase),
    CONSTRAINT outbox_lease_whole CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

-- Claim of ready work: an index scan in available_at order over unleased rows only.
CREATE INDEX outbox_ready ON oncebox.outbox (phase, available_at) WHERE lease_owner IS NULL;
-- Claim of work whose lease expired (a crashed or stalled worker).
CREATE INDEX outbox_leased ON oncebox.outbox (lease_expires_at) WHERE lease_owner IS NOT NULL;

-- Workers waiting for work. A submit NOTIFYs only while a worker is registered here (seen
-- within the last minute): NOTIFY serialises every notifying commit on a cluster-wide lock held
-- through the WAL flush, halving intake, and a busy pool polls anyway. A worker registers, then
-- claims once more, then waits on LISTEN with a polling fallback; it deregisters once it has
-- work, and refreshes seen_at while it waits.
CREATE TABLE oncebox.waiting_workers (
    worker  text        PRIMARY KEY,
    seen_at timestamptz NOT NULL DEFAULT now()
);

-- The retry report: one row per attempt, reconciliation lookup or operator decision.
CREATE TABLE oncebox.attempts (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    intent_id   bigint      NOT NULL REFERENCES oncebox.intents (id) ON DELETE CASCADE,
    attempt     integer     NOT NULL,
    epoch       bigint      NOT NULL,
    worker      text        NOT NULL,
    phase       text        NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    outcome     text,       -- succeeded | retry_before_execution | permanent | unknown | …
    status_code integer,
    error_code  text,
    detail      text
);
CREATE INDEX attempts_by_intent ON oncebox.attempts (intent_id, attempt);

-- Bearer tokens, stored as SHA-256 hex of the token; the token itself is shown once.
CREATE TABLE oncebox.api_tokens (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  text        NOT NULL,
    role       text        NOT NULL CHECK (role IN ('agent', 'ops')),
    token_hash text        NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    label      text,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
