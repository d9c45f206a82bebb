-- Circuit breakers, one row per destination that has one (`[destinations.X.breaker]`), shared by
-- the whole pool: `closed` (deliveries flow; `failures` counts the current run of failures),
-- `open` (no deliveries until `probe_at`), `half_open` (one probe under way until `probe_at`),
-- `disabled` (a 410 Gone or an operator: no deliveries until an operator enables it). Workers
-- read the table about once a second; intents of a destination that is not closed wait queued,
-- their deadlines still running.
CREATE TABLE oncebox.destination_state (
    destination text        PRIMARY KEY,
    state       text        NOT NULL DEFAULT 'closed'
                            CHECK (state IN ('closed', 'open', 'half_open', 'disabled')),
    failures    integer     NOT NULL DEFAULT 0 CHECK (failures >= 0),
    probe_at    timestamptz,
    reason      text,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Request rates, one row per destination that has one (`[destinations.X.rate_limit]`), shared
-- by the whole pool: a token bucket (`tokens` as of `refilled_at`, refilled at the configured
-- rate up to the burst) that workers take from before sending, and `slowed_until`, set by a 429
-- or 503 with Retry-After: no worker sends before it.
CREATE TABLE oncebox.destination_rate (
    destination  text        PRIMARY KEY,
    tokens       float8      NOT NULL,
    refilled_at  timestamptz NOT NULL DEFAULT now(),
    slowed_until timestamptz
);
