// Through Drizzle's node-postgres driver: `db.transaction(tx => submit(tx, …))` commits the
// intent with the transaction's rows, a transaction that throws leaves neither, and a replay
// through Drizzle returns the intent.
import assert from "node:assert/strict";
import { test } from "node:test";

import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/node-postgres";
import pg from "pg";

import { Intake, KeyConflict, submit } from "oncebox";
import { Scratch } from "./support.js";

const intake = Intake.fromToml(`[actions.pay]
destination = "billing"

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/pay"
idempotency = "key"
`);

test("submit in a Drizzle transaction commits with its rows, or not at all", async () => {
  const scratch = await Scratch.create("drizzle");
  const pool = new pg.Pool({ connectionString: scratch.url });
  const db = drizzle(pool);
  try {
    await db.execute(sql`CREATE TABLE payments (id text PRIMARY KEY)`);
    const first = await db.transaction(async (tx) => {
      await tx.execute(sql`INSERT INTO payments (id) VALUES ('p-1')`);
      return submit(tx, { tenant: "acme", key: "pay-1", action: "pay", arguments: { amount: "3.00" }, config: intake });
    });
    assert.equal(first.created, true);
    await assert.rejects(
      db.transaction(async (tx) => {
        await tx.execute(sql`INSERT INTO payments (id) VALUES ('p-2')`);
        await submit(tx, { tenant: "acme", key: "pay-2", action: "pay", arguments: { amount: "4.00" }, config: intake });
        throw new Error("the orchestrator fails after the submit");
      }),
      /fails after the submit/,
    );
    const again = await db.transaction((tx) =>
      submit(tx, { tenant: "acme", key: "pay-1", action: "pay", arguments: { amount: "3.00" }, config: intake }),
    );
    assert.deepEqual([again.created, again.intent.id, again.intent.status], [false, first.intent.id, "pending"]);
    await assert.rejects(
      db.transaction((tx) => submit(tx, { tenant: "acme", key: "pay-1", action: "pay", arguments: { amount: "9.00" }, config: intake })),
      (e) => e instanceof KeyConflict,
    );
    assert.equal(
      await scratch.scalar(
        "SELECT string_agg(p.id || ':' || coalesce(i.idempotency_key, '-'), ',' ORDER BY p.id) FROM payments p FULL JOIN oncebox.intents i ON i.idempotency_key = 'pay-' || substr(p.id, 3)",
      ),
      "p-1:pay-1",
    );
  } finally {
    await pool.end();
    await scratch.drop();
  }
});
