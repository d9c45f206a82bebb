-- Record (fenced, batched): the outcomes of several deliveries or reconciliations in one
-- statement — journal status, the attempts row, and the outbox row deleted ('done'),
-- rescheduled in its phase ('retry'), turned into a reconciliation ('reconcile') or sent back to
-- delivery with the same key ('reissue'). Entering failed, expired or needs_review enqueues a
-- dead-letter notification in the same statement; a redacted intent that ends where an operator
-- may retry it keeps its original arguments in held_arguments, so that the retry re-sends exactly
-- what was sent. Only rows still leased to worker $17 at the
-- given epoch are written: a stale worker writes nothing. Waiters on channel $18 hear once per
-- statement that intents settled. Returns the intents written.
WITH f AS (
    SELECT * FROM unnest(
        $1::bigint[], $2::bigint[], $3::int[], $4::oncebox.intent_status[], $5::jsonb[],
        $6::text[], $7::jsonb[], $8::text[], $9::float8[], $10::oncebox.attempt_kind[],
        $11::int[], $12::oncebox.error_code[], $13::text[], $14::float8[],
        $15::oncebox.phase[], $16::bool[])
      AS f(intent_id, epoch, attempt, status, response, external_reference,
           last_error, next, delay_secs, outcome, status_code, error_code,
           detail, started_secs_ago, phase, counts_attempt)
), owned AS (
    -- One primary-key lookup per outcome, its row locked and checked again once the lock is
    -- held, as in record_succeeded.sql: joined on `lease_owner = $17`, the fence could be
    -- planned from the partial index `outbox_leased` and read every row leased to any worker.
    -- `IS NOT DISTINCT FROM` is `=` here ($17 is never null) without implying
    -- `lease_owner IS NOT NULL`, the predicate that would let the planner choose that index.
    SELECT f.* FROM f
    CROSS JOIN LATERAL (
        SELECT 1 FROM oncebox.outbox o
        WHERE o.intent_id = f.intent_id AND o.phase = f.phase
          AND o.epoch = f.epoch AND o.lease_owner IS NOT DISTINCT FROM $17
        FOR UPDATE
    ) fenced
), done AS (
    DELETE FROM oncebox.outbox o USING owned
    WHERE o.intent_id = owned.intent_id AND o.phase = owned.phase AND owned.next = 'done'
    RETURNING o.intent_id, o.arguments
), moved AS (
    UPDATE oncebox.outbox o
    SET lease_owner = NULL, lease_expires_at = NULL,
        -- A reconciliation measures its consistency window from the dispatch: keep it.
        dispatched_at = CASE WHEN owned.next = 'reconcile'
                               OR (owned.next = 'retry' AND o.phase = 'reconcile')
                             THEN coalesce(o.dispatched_at, now()) END,
        attempt = owned.attempt,
        phase = CASE owned.next WHEN 'reconcile' THEN 'reconcile'::oncebox.phase
                                WHEN 'reissue' THEN 'deliver'::oncebox.phase ELSE o.phase END,
        available_at = now() + make_interval(secs => owned.delay_secs)
    FROM owned
    WHERE o.intent_id = owned.intent_id AND o.phase = owned.phase
      AND owned.next IN ('retry', 'reconcile', 'reissue')
    RETURNING o.intent_id
), journal AS (
    UPDATE oncebox.intents i
    SET status = owned.status,
        attempt_count = owned.attempt,
        response = coalesce(owned.response, i.response),
        external_reference = coalesce(owned.external_reference, i.external_reference),
        last_error = coalesce(owned.last_error, i.last_error),
        updated_at = now(),
        completed_at = CASE WHEN oncebox.is_terminal(owned.status)
                            THEN coalesce(i.completed_at, now()) END
    FROM owned
    -- A terminal intent never changes (a row claimed after it was cancelled is only cleared).
    -- The intents are found by primary key from the fenced batch (`ANY`): joined on the key
    -- alone, a small journal was read whole for a hash join.
    WHERE i.id = owned.intent_id AND i.id = ANY (ARRAY(SELECT intent_id FROM owned))
      AND i.completed_at IS NULL
    RETURNING i.id, i.status, i.tenant_id
), dead_letter AS (
    INSERT INTO oncebox.outbox (intent_id, phase, tenant_id)
    SELECT id, 'notify'::oncebox.phase, tenant_id FROM journal WHERE oncebox.is_dead_letter(status)
    ON CONFLICT (intent_id, phase) DO UPDATE SET available_at = now()
    RETURNING intent_id
), held AS (
    INSERT INTO oncebox.held_arguments (intent_id, arguments)
    SELECT done.intent_id, done.arguments
    FROM done JOIN journal ON journal.id = done.intent_id
    WHERE done.arguments IS NOT NULL AND oncebox.is_retryable(journal.status)
    ON CONFLICT (intent_id) DO UPDATE SET arguments = EXCLUDED.arguments, held_at = now()
), report AS (
    INSERT INTO oncebox.attempts
        (intent_id, attempt, epoch, worker, phase, started_at, finished_at,
         outcome, status_code, error_code, detail)
    SELECT intent_id, attempt, epoch, $17, phase,
           now() - make_interval(secs => started_secs_ago), now(),
           outcome, status_code, error_code, detail
    FROM owned WHERE counts_attempt
    RETURNING intent_id
)
-- Waiters (GET ?wait=) learn that intents settled: one notification per statement, not per row.
, finished AS (
    SELECT pg_notify($18, '') FROM journal WHERE oncebox.is_settled(status) LIMIT 1
)
SELECT intent_id, (SELECT count(*) FROM finished) AS notified FROM owned
