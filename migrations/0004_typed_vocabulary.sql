-- One name, one type, for each concept: statuses, outbox phases, the retry report's kinds, error
-- codes and token roles become enum types whose labels equal the Rust enums of the same names
-- (oncebox_core::Status, oncebox_store::Phase, oncebox_core::AttemptKind, oncebox_core::ErrorCode,
-- oncebox_store::tokens::Role; a test compares them). The terminal, settled and dead-letter sets
-- are written once, here, as functions every statement calls (docs/architecture.md, "Statuses").
-- Forward-only: a new label is `ALTER TYPE … ADD VALUE` in a later migration.

CREATE TYPE oncebox.intent_status AS ENUM (
    'pending', 'in_flight', 'unknown', 'reconciling', 'needs_review',
    'succeeded', 'failed', 'cancelled', 'expired');

CREATE TYPE oncebox.phase AS ENUM ('deliver', 'reconcile', 'notify');

CREATE TYPE oncebox.attempt_kind AS ENUM (
    'succeeded', 'retry_before_execution', 'permanent', 'unknown',
    'previous_outcome_unknown', 'expired', 'policy_rejected',
    'no_lookup', 'lookup_found', 'lookup_none', 'lookup_failed', 'lookup_ambiguous',
    'lookup_mismatch', 'reissue',
    'operator_retry', 'operator_resolved', 'cancelled');

CREATE TYPE oncebox.error_code AS ENUM (
    'connect_refused', 'dns', 'tls', 'timeout', 'connection_reset', 'http_status',
    'malformed_response', 'stream_incomplete', 'unroutable', 'nacked', 'worker_lost',
    'policy_rejected', 'previous_outcome_unknown', 'expired', 'no_lookup', 'lookup_none',
    'lookup_failed', 'lookup_ambiguous', 'lookup_mismatch', 'reissue', 'operator');

CREATE TYPE oncebox.token_role AS ENUM ('agent', 'ops');

-- Terminal: never changes again. Settled: automation is done with it (terminal, or waiting for a
-- person). Dead letter: entering it publishes a dead letter. Simple immutable SQL functions,
-- inlined by the planner, so calling them costs what the literal lists cost.
CREATE FUNCTION oncebox.is_terminal(s oncebox.intent_status) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT s IN ('succeeded', 'failed', 'cancelled', 'expired') $$;

CREATE FUNCTION oncebox.is_settled(s oncebox.intent_status) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT s IN ('succeeded', 'failed', 'cancelled', 'expired', 'needs_review') $$;

CREATE FUNCTION oncebox.is_dead_letter(s oncebox.intent_status) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT s IN ('failed', 'expired', 'needs_review') $$;

-- The journal: the enum type enforces the status set (the CHECK of 0001 is no longer needed).
ALTER TABLE oncebox.intents
    DROP CONSTRAINT intents_status,
    DROP CONSTRAINT intents_completed_iff_terminal;
ALTER TABLE oncebox.intents
    ALTER COLUMN status DROP DEFAULT,
    ALTER COLUMN status TYPE oncebox.intent_status USING status::oncebox.intent_status,
    ALTER COLUMN status SET DEFAULT 'pending';
ALTER TABLE oncebox.intents
    ADD CONSTRAINT intents_completed_iff_terminal
        CHECK ((completed_at IS NOT NULL) = oncebox.is_terminal(status));

ALTER TABLE oncebox.outbox DROP CONSTRAINT outbox_phase_check;
ALTER TABLE oncebox.outbox
    ALTER COLUMN phase TYPE oncebox.phase USING phase::oncebox.phase;

-- The retry report: an operator's row has no phase of outbox work (it was 'ops').
ALTER TABLE oncebox.attempts ALTER COLUMN phase DROP NOT NULL;
ALTER TABLE oncebox.attempts
    ALTER COLUMN phase TYPE oncebox.phase USING nullif(phase, 'ops')::oncebox.phase,
    ALTER COLUMN outcome TYPE oncebox.attempt_kind USING outcome::oncebox.attempt_kind,
    ALTER COLUMN error_code TYPE oncebox.error_code USING error_code::oncebox.error_code;

ALTER TABLE oncebox.api_tokens DROP CONSTRAINT api_tokens_role_check;
ALTER TABLE oncebox.api_tokens
    ALTER COLUMN role TYPE oncebox.token_role USING role::oncebox.token_role;
