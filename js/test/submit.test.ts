// In-transaction submit from node-postgres on the real Postgres: it commits with the caller's own
// row or not at all, replays, conflicts and refusals write nothing, 32 concurrent submits of one
// key make one intent, and a row written from TypeScript equals one written by the Rust CLI.
import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import type pg from "pg";

import { Intake, InvalidIntent, KeyConflict, type Queryable, submit } from "oncebox";
import { Scratch, oncebox } from "./support.js";

const CONFIG = `
[actions.charge]
destination = "billing"
redact = [{ pointer = "/card", mode = "hash" }]

[actions.pay]
destination = "billing"

[actions.refund]
destination = "billing"
[actions.refund.approval]
approvals = 2
when = { type = "object", required = ["amount"], properties = { amount = { decimalMinimum = "1000" } } }

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/charges"
idempotency = "key"
`;
const KEYS = "test:c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTMy";
const intake = Intake.fromToml(CONFIG, { redactionKeys: KEYS });

let db: Scratch;
before(async () => {
  db = await Scratch.create("submit");
});
after(async () => {
  await db.drop();
});

async function inTransaction<T>(f: (client: pg.Client) => Promise<T>, commit = true): Promise<T> {
  const client = await db.client();
  try {
    await client.query("BEGIN");
    const out = await f(client);
    await client.query(commit ? "COMMIT" : "ROLLBACK");
    return out;
  } finally {
    await client.end();
  }
}

const count = async (key: string) =>
  Number(await db.scalar("SELECT count(*) FROM oncebox.intents WHERE idempotency_key = $1", [key]));

test("the intent commits with the caller's own row, and a rollback leaves neither", async () => {
  await db.scalar("CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY)");
  for (const commit of [true, false]) {
    const key = `order-${String(commit)}`;
    const submitted = await inTransaction(async (client) => {
      await client.query("INSERT INTO orders (id) VALUES ($1)", [key]);
      return submit(client, { tenant: "acme", key, action: "pay", arguments: { amount: "12.50" }, config: intake });
    }, commit);
    assert.equal(submitted.created, true);
    assert.equal(submitted.intent.status, "pending");
    const orders = Number(await db.scalar("SELECT count(*) FROM orders WHERE id = $1", [key]));
    const outbox = Number(
      await db.scalar(
        "SELECT count(*) FROM oncebox.outbox o JOIN oncebox.intents i ON i.id = o.intent_id WHERE i.idempotency_key = $1",
        [key],
      ),
    );
    assert.deepEqual([orders, await count(key), outbox], commit ? [1, 1, 1] : [0, 0, 0]);
  }
});

test("a replay returns the intent; another request under the key conflicts and writes nothing", async () => {
  const args = { amount: "5.00", note: "first" };
  const first = await inTransaction((c) => submit(c, { tenant: "acme", key: "r1", action: "pay", arguments: args, config: intake }));
  const again = await inTransaction((c) =>
    submit(c, { tenant: "acme", key: "r1", action: "pay", arguments: { note: "first", amount: "5.00" }, config: intake }),
  );
  assert.equal(again.created, false);
  assert.equal(again.intent.id, first.intent.id);
  await assert.rejects(
    inTransaction((c) => submit(c, { tenant: "acme", key: "r1", action: "pay", arguments: { amount: "6.00" }, config: intake })),
    (e) =>
      e instanceof KeyConflict &&
      e.existingHash === first.intent.requestHash && e.existingId === first.intent.id &&
      e.submittedHash !== first.intent.requestHash,
  );
  assert.equal(await count("r1"), 1);
});

test("a bad field is refused, naming it, before any statement", async () => {
  const untouched: Queryable = {
    query: () => Promise.reject(new Error("no statement may run")),
  };
  const cases: [Parameters<typeof submit>[1], string][] = [
    [{ tenant: "acme", key: "", action: "pay", arguments: {}, config: intake }, "idempotency_key"],
    [{ tenant: "acme", key: "k", action: "nope", arguments: {}, config: intake }, "action"],
    [{ tenant: "acme", key: "k", action: "pay", arguments: { n: 2n ** 60n }, config: intake }, "arguments/n"],
    [{ tenant: "acme", key: "k", action: "pay", arguments: '{"n": 9007199254740993}', config: intake }, "arguments/n"],
    [{ tenant: "acme", key: "k\u0000", action: "pay", arguments: {}, config: intake }, "idempotency_key"],
    [{ tenant: "acme", key: "k".repeat(10_000), action: "pay", arguments: {}, config: intake }, "idempotency_key"],
    [{ tenant: "acme", key: "k", action: "pay", arguments: {}, deadline: new Date(Number.NaN), config: intake }, "deadline"],
  ];
  for (const [options, field] of cases) {
    await assert.rejects(submit(untouched, options), (e) => e instanceof InvalidIntent && e.field === field, field);
  }
});

test("the submitter is recorded: the intake's principal, one named per submit, else the database role", async () => {
  const named = Intake.fromToml(CONFIG, { redactionKeys: KEYS, principal: "billing-agent" });
  await inTransaction((c) => submit(c, { tenant: "acme", key: "who-1", action: "pay", arguments: {}, config: named }));
  await inTransaction((c) =>
    submit(c, { tenant: "acme", key: "who-2", action: "pay", arguments: {}, config: named, principal: "ana@example.com" }),
  );
  await inTransaction((c) => submit(c, { tenant: "acme", key: "who-3", action: "pay", arguments: {}, config: intake }));
  const by = async (key: string) =>
    db.scalar("SELECT submitted_by FROM oncebox.intents WHERE idempotency_key = $1", [key]);
  assert.equal(await by("who-1"), "user:billing-agent");
  assert.equal(await by("who-2"), "user:ana@example.com");
  assert.equal(await by("who-3"), "db:postgres");
  for (const bad of ["", " ana", "a\u0000b", "x".repeat(256)]) {
    assert.throws(
      () => Intake.fromToml(CONFIG, { redactionKeys: KEYS, principal: bad }),
      (e) => e instanceof InvalidIntent && e.field === "principal",
      JSON.stringify(bad),
    );
  }
});

test("32 concurrent submits of one key make one intent", async () => {
  const results = await Promise.all(
    Array.from({ length: 32 }, () =>
      inTransaction((c) => submit(c, { tenant: "acme", key: "race", action: "pay", arguments: { amount: "1.00" }, config: intake })),
    ),
  );
  assert.equal(results.filter((r) => r.created).length, 1);
  assert.equal(new Set(results.map((r) => r.intent.id)).size, 1);
  assert.equal(await count("race"), 1);
});

test("a row written from TypeScript equals the one the Rust CLI writes", async () => {
  const args = { amount: "99.00", card: "4111111111111111" };
  const deadline = "2030-01-02T03:04:05.678Z";
  await inTransaction((c) =>
    submit(c, {
      tenant: "ts",
      key: "same",
      action: "charge",
      arguments: args,
      businessRef: "inv-7",
      runId: "run-1",
      step: "3",
      deadline: new Date(deadline),
      config: intake,
    }),
  );
  const path = join(tmpdir(), `${db.name}.toml`);
  writeFileSync(path, CONFIG);
  try {
    await oncebox(
      ["submit", "--config", path, "--tenant", "rust", "--action", "charge", "--arguments", JSON.stringify(args),
        "--business-ref", "inv-7", "--run-id", "run-1", "--step", "3", "--deadline", deadline, "same"],
      { DATABASE_URL: db.url, ONCEBOX_REDACTION_KEYS: KEYS },
    );
  } finally {
    rmSync(path);
  }
  const rows = async (tenant: string) =>
    db.scalar(
      `SELECT jsonb_build_object(
         'intent', to_jsonb(i) - 'id' - 'tenant_id' - 'created_at' - 'updated_at',
         'outbox', (SELECT jsonb_agg(to_jsonb(o) - 'intent_id' - 'tenant_id' - 'available_at' ORDER BY o.phase)
                    FROM oncebox.outbox o WHERE o.intent_id = i.id))
       FROM oncebox.intents i WHERE tenant_id = $1 AND idempotency_key = 'same'`,
      [tenant],
    );
  const fromTs = await rows("ts");
  const fromRust = await rows("rust");
  assert.deepEqual(fromTs, fromRust);
  assert.ok(!JSON.stringify((fromTs as { intent: unknown }).intent).includes("4111111111111111"), "redacted");
});

test("an ordering key joins its lane: the second intent waits behind the first, as from Rust", async () => {
  for (const key of ["lane-1", "lane-2"]) {
    await inTransaction((c) =>
      submit(c, { tenant: "ts", key, action: "pay", arguments: { amount: "1.00" }, orderingKey: "acct-7", config: intake }),
    );
  }
  const path = join(tmpdir(), `${db.name}-lanes.toml`);
  writeFileSync(path, CONFIG);
  try {
    for (const key of ["lane-1", "lane-2"]) {
      await oncebox(
        ["submit", "--config", path, "--tenant", "rust", "--action", "pay", "--arguments", '{"amount": "1.00"}', "--ordering-key", "acct-7", key],
        { DATABASE_URL: db.url, ONCEBOX_REDACTION_KEYS: KEYS },
      );
    }
  } finally {
    rmSync(path);
  }
  const rows = async (tenant: string) =>
    db.scalar(
      `SELECT jsonb_agg(jsonb_build_object(
         'intent', to_jsonb(i) - 'id' - 'tenant_id' - 'created_at' - 'updated_at' - 'lane_id',
         'parked', (SELECT o.available_at = 'infinity' FROM oncebox.outbox o WHERE o.intent_id = i.id))
         ORDER BY i.lane_seq)
       FROM oncebox.intents i WHERE tenant_id = $1 AND idempotency_key LIKE 'lane-%'`,
      [tenant],
    );
  const fromTs = (await rows("ts")) as { intent: { lane_seq: number }; parked: boolean }[];
  assert.deepEqual(fromTs, await rows("rust"));
  assert.deepEqual(
    fromTs.map((r) => [r.intent.lane_seq, r.parked]),
    [
      [1, false],
      [2, true],
    ],
  );
});

test("an action with an approval policy is held alike from TypeScript and the Rust CLI", async () => {
  const refunds: [string, { amount: string }][] = [
    ["big", { amount: "5000" }],
    ["small", { amount: "10" }],
  ];
  const path = join(tmpdir(), `${db.name}-policy.toml`);
  writeFileSync(path, CONFIG);
  try {
    for (const [key, args] of refunds) {
      await inTransaction((c) => submit(c, { tenant: "ts", key, action: "refund", arguments: args, config: intake }));
      await oncebox(
        ["submit", "--config", path, "--tenant", "rust", "--action", "refund", "--arguments", JSON.stringify(args), key],
        { DATABASE_URL: db.url, ONCEBOX_REDACTION_KEYS: KEYS },
      );
    }
  } finally {
    rmSync(path);
  }
  const row = async (tenant: string, key: string) =>
    (await db.scalar(
      `SELECT jsonb_build_object(
         'intent', to_jsonb(i) - 'id' - 'tenant_id' - 'created_at' - 'updated_at' - 'approval_expires_at',
         'window', extract(epoch FROM i.approval_expires_at - i.created_at)::int,
         'phases', (SELECT jsonb_agg(o.phase ORDER BY o.phase) FROM oncebox.outbox o WHERE o.intent_id = i.id))
       FROM oncebox.intents i WHERE tenant_id = $1 AND idempotency_key = $2`,
      [tenant, key],
    )) as { intent: { status: string; approvals_needed: number | null }; window: number | null; phases: string[] };
  for (const [key] of refunds) {
    assert.deepEqual(await row("ts", key), await row("rust", key), key);
  }
  const big = await row("ts", "big");
  assert.equal(big.intent.status, "awaiting_approval");
  assert.equal(big.intent.approvals_needed, 2);
  assert.equal(big.window, 86400);
  assert.deepEqual(big.phases, ["deliver", "ask"]);
  const small = await row("ts", "small");
  assert.equal(small.intent.status, "pending");
  assert.equal(small.intent.approvals_needed, null);
  assert.equal(small.window, null);
  assert.deepEqual(small.phases, ["deliver"]);
});
