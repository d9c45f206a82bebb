import { createHash } from "node:crypto";

import { KeyConflict, InvalidIntent, OnceboxError } from "./errors.js";
import { Intake, type NewIntent, type Prepared, principalOf } from "./intake.js";
import type { Intent, Status, Submitted } from "./model.js";
import { FACTS, STATEMENTS } from "./native.js";

/**
 * A node-postgres `Client` or `PoolClient` (or anything with its `query(config)`), inside the
 * caller's `BEGIN … COMMIT`.
 */
export interface Queryable {
  query(config: {
    name?: string;
    text: string;
    values: unknown[];
    types: { getTypeParser: (oid: number, format?: string) => (text: string) => unknown };
  }): Promise<{ rows: Record<string, unknown>[] }>;
}

/**
 * A Drizzle transaction over node-postgres (`db.transaction(tx => submit(tx, …))`), or anything
 * whose `execute` runs a Drizzle `SQL` query.
 */
export interface DrizzleExecutor {
  execute(query: never): PromiseLike<{ rows: Record<string, unknown>[] }>;
}

function isDrizzle(client: Queryable | DrizzleExecutor): client is DrizzleExecutor {
  // A Drizzle database has a `query` too: its relational query builder, not a function.
  return typeof (client as { query?: unknown }).query !== "function";
}

/**
 * A Queryable over a Drizzle transaction: the statement's `$n` placeholders become Drizzle
 * parameters (each occurrence its own, bound to the same value), so the text sent is still the
 * Rust store's. Drizzle parses some column types its own way; the rows are read either way.
 */
async function overDrizzle(tx: DrizzleExecutor): Promise<Queryable> {
  const { sql } = await import("drizzle-orm");
  return {
    query: async ({ text, values }) => {
      const chunks = text
        .split(/\$(\d+)/)
        .map((part, i) => (i % 2 === 0 ? sql.raw(part) : sql.param(values[Number(part) - 1])));
      return tx.execute(sql.join(chunks) as never);
    },
  };
}

/** What `submit` takes: the intent's fields, its deadline and the intake that checks them. */
export interface SubmitOptions extends NewIntent {
  /** No attempt starts after it. */
  deadline?: Date | null;
  /** The intake (`Intake.load("oncebox.toml")`), built once at start-up. */
  config: Intake;
  /** Wake an idle worker at commit (default true), as the Rust intake does. */
  notify?: boolean;
  /**
   * Who submits (`user:NAME`) instead of the intake's principal; with neither, the database
   * role is recorded (`db:ROLE`). The submitter may not approve it.
   */
  principal?: string;
}

const statements = STATEMENTS;

/**
 * Each statement is prepared once per connection under a name of its own (the text's hash in
 * it, so that another version of the package never finds a different statement under it):
 * planning the submit statement afresh each time would cost as much as running it.
 */
function named(text: string): string {
  return `oncebox_${createHash("sha256").update(text).digest("hex").slice(0, 16)}`;
}
const NAMES = {
  submit: named(statements.submit),
  submitOrdered: named(statements.submitOrdered),
  intentByKey: named(statements.intentByKey),
};

/** Every column as the text Postgres sent: JSON stays exact, ids stay whole. */
const RAW = { getTypeParser: () => (text: string) => text };

/**
 * Records an intent in the journal and the outbox inside the caller's open transaction, with the
 * statement text of the Rust store, so that TypeScript, Rust and Python write identical rows.
 * Nothing is visible to workers until the caller commits, and nothing remains if it rolls back.
 * The same key with the same request returns the existing intent (`created: false`); the same key
 * with another request throws `KeyConflict` with both hashes and writes nothing; a bad field
 * throws `InvalidIntent` naming it, before any statement runs.
 */
export async function submit(
  connection: Queryable | DrizzleExecutor,
  options: SubmitOptions,
): Promise<Submitted> {
  const { config, deadline = null, notify = true } = options;
  const prepared = config.prepare(options);
  if (deadline !== null && !(deadline instanceof Date && Number.isFinite(deadline.getTime()))) {
    throw new InvalidIntent("deadline", "must be a valid Date");
  }
  const client = isDrizzle(connection) ? await overDrizzle(connection) : connection;
  const values = params(options, prepared, deadline, notify);
  const [name, text] =
    options.orderingKey == null
      ? [NAMES.submit, statements.submit]
      : [NAMES.submitOrdered, statements.submitOrdered];
  const inserted = (await client.query({ name, text, values, types: RAW })).rows[0];
  if (inserted !== undefined) {
    return { intent: created(options, prepared, deadline, inserted), created: true };
  }
  const existing = (
    await client.query({
      name: NAMES.intentByKey,
      text: statements.intentByKey,
      values: [options.tenant, options.key],
      types: RAW,
    })
  ).rows[0];
  if (existing === undefined) {
    throw new OnceboxError(
      "the key's row conflicted on insert but is not visible to this transaction " +
        "(REPEATABLE READ or SERIALIZABLE: roll back and retry)",
    );
  }
  const recordedHash = str(existing.request_hash);
  const replay = config.isReplay(options.action, prepared, recordedHash, json(existing.payload));
  if (!replay) {
    throw new KeyConflict(options.key, str(existing.id), recordedHash, prepared.requestHash);
  }
  return { intent: fromRow(existing), created: false };
}

/**
 * The submit statement's parameters, by the names the core lists them in their order
 * (`oncebox_sql::SUBMIT_PARAMS`, and `SUBMIT_ORDERED_PARAMS` for an intent with an ordering key):
 * adding a field to the statement adds it to that list, and a name this package does not fill
 * is an error here rather than a shifted parameter.
 */
function params(o: SubmitOptions, p: Prepared, deadline: Date | null, notify: boolean): unknown[] {
  const ordered = o.orderingKey != null;
  const lane = ordered ? o.config.lane(o.action) : null;
  const values: Record<string, unknown> = {
    tenant: o.tenant,
    key: o.key,
    action: o.action,
    request_hash: p.requestHash,
    payload: p.payload,
    business_ref: o.businessRef ?? null,
    run_id: o.runId ?? null,
    step: o.step ?? null,
    deadline,
    delivery_arguments: p.redacted ? p.argumentsJson : null,
    approvals: p.approvals,
    approval_window: p.approvalWindow,
    submitted_by: o.principal == null ? o.config.principal : principalOf(o.principal),
    notify,
    channel: statements.outboxChannel,
    ordering_key: o.orderingKey ?? null,
    destination: lane?.destination ?? null,
    skip_failed: lane?.skipFailed ?? null,
  };
  return (ordered ? FACTS.submitOrderedParams : FACTS.submitParams).map((name) => {
    if (!(name in values)) {
      throw new OnceboxError(`the submit statement takes a parameter this package does not fill: ${name}`);
    }
    return values[name];
  });
}

function created(
  o: SubmitOptions,
  p: Prepared,
  deadline: Date | null,
  row: Record<string, unknown>,
): Intent {
  return {
    id: str(row.id),
    tenantId: o.tenant,
    idempotencyKey: o.key,
    action: o.action,
    status: str(row.status) as Status,
    requestHash: p.requestHash,
    payload: p.payload,
    businessRef: o.businessRef ?? null,
    runId: o.runId ?? null,
    step: o.step ?? null,
    deadline,
    orderingKey: o.orderingKey ?? null,
    createdAt: when(row.created_at),
  };
}

/** A column's text (every column is read as text), or null. */
function text(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

/** A timestamp column, as text or as the `Date` a driver made of it. */
function when(value: unknown): Date {
  return value instanceof Date ? value : new Date(str(value));
}

/** A JSON column, as text or as the value a driver parsed (its numbers are safe: submit refused
 * any beyond ±2^53). */
function json(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** A column that is never null. */
function str(value: unknown): string {
  if (typeof value !== "string") {
    throw new OnceboxError(`expected a column's text, got ${typeof value}`);
  }
  return value;
}

/** An intent from its journal row, every column as text. */
export function fromRow(row: Record<string, unknown>): Intent {
  const deadline = row.deadline instanceof Date ? row.deadline.toISOString() : text(row.deadline);
  return {
    id: str(row.id),
    tenantId: str(row.tenant_id),
    idempotencyKey: str(row.idempotency_key),
    action: str(row.action),
    status: str(row.status) as Status,
    requestHash: str(row.request_hash),
    payload: json(row.payload),
    businessRef: text(row.business_ref),
    runId: text(row.run_id),
    step: text(row.step),
    deadline: deadline === null ? null : new Date(deadline),
    orderingKey: text(row.ordering_key),
    createdAt: when(row.created_at),
  };
}
