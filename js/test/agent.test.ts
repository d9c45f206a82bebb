// The example agent loop against `oncebox serve`, a worker and a receiver that executes every
// request: it crashes after step 2 (the third call), is replayed from the start, and each step
// has exactly one effect. The tool wrapper's typed outcomes, too.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { RunContext } from "@openai/agents";

import { AwaitingApproval, Client, IntentFailed, deliveryKey, onceboxTool, stepKey } from "oncebox";
import { Proc, Scratch, freePort, oncebox } from "./support.js";

const example = join(dirname(fileURLToPath(import.meta.url)), "..", "examples", "agent-loop.js");

test("a replayed agent run makes one effect per step; outcomes are typed", async () => {
  const db = await Scratch.create("agent");
  const [rxPort, apiPort] = [await freePort(), await freePort()];
  const receiver = await Proc.start(["receiver", "--listen", `127.0.0.1:${String(rxPort)}`], {}, rxPort);
  const path = join(tmpdir(), `${db.name}.toml`);
  writeFileSync(
    path,
    `[actions.create_invoice]
destination = "billing"

[actions.refund]
destination = "billing"
[actions.refund.approval]
approvals = 1

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:${String(rxPort)}/invoices"
idempotency = "key"
`,
  );
  const api = await Proc.start(
    ["serve", "--database-url", db.url, "--config", path, "--listen", `127.0.0.1:${String(apiPort)}`],
    {},
    apiPort,
  );
  const worker = await Proc.start(["worker", "--database-url", db.url, "--config", path, "--poll-interval", "100ms"]);
  try {
    const token = (await oncebox(["ops", "token", "create", "--tenant", "acme"], { DATABASE_URL: db.url })).trim();
    const env = { ...process.env, ONCEBOX_URL: `http://127.0.0.1:${String(apiPort)}`, ONCEBOX_TOKEN: token, RUN_ID: "run-7" };
    const crashed = await promisify(execFile)(process.execPath, [example], { env: { ...env, CRASH_AFTER: "1" } }).then(
      () => 0,
      (e: unknown) => (e as { code?: number }).code ?? -1,
    );
    assert.equal(crashed, 3, "the first run ended after its second step");
    const { stdout } = await promisify(execFile)(process.execPath, [example], { env });
    assert.equal(stdout.trim().split("\n").length, 3);
    // Effects at the receiver for one of acme's keys: it sees the delivery key.
    const effects = async (key: string) => {
      const sent = encodeURIComponent(deliveryKey("acme", key));
      const answer = await fetch(`http://127.0.0.1:${String(rxPort)}/effects?key=${sent}`);
      return ((await answer.json()) as { data: unknown[] }).data.length;
    };
    const scripted = [
      { order_id: "o-1", amount: "12.50" },
      { order_id: "o-2", amount: "7.00" },
      { order_id: "o-3", amount: "99.90" },
    ];
    for (const [step, args] of scripted.entries()) {
      assert.equal(await effects(stepKey("run-7", step, "create_invoice", args)), 1, `step ${String(step)}`);
    }
    assert.equal(Number(await db.scalar("SELECT count(*) FROM oncebox.intents")), 3);

    // Without a run: identical calls within the window are one intent.
    const client = new Client(`http://127.0.0.1:${String(apiPort)}`, token);
    const invoice = onceboxTool("create_invoice", { via: client, key: ["/order_id"] });
    const first = await invoice.execute({ order_id: "o-9", amount: "1.00" });
    const again = await invoice.execute({ order_id: "o-9", amount: "1.00" });
    assert.equal(again.idempotencyKey, first.idempotencyKey);
    assert.equal(await effects(first.idempotencyKey), 1);
    // Typed outcomes: waiting for people, and refused by the destination.
    const refund = onceboxTool("refund", { via: client, timeoutMs: 5000 });
    await assert.rejects(refund.execute({ order_id: "o-1" }, { session: "run-8", step: 0 }), (e) => e instanceof AwaitingApproval);
    // The reference receiver refuses a request whose arguments ask it to (400: failed).
    await assert.rejects(
      invoice.execute({ order_id: "o-10", faults: ["400"] }, { session: "run-8", step: 1 }),
      (e) => e instanceof IntentFailed && e.intent.status === "failed",
    );

    // The README's SDK tools: the Vercel AI SDK's and the OpenAI Agents SDK's, called as their
    // runtimes call them, twice each for one order: one intent, one effect.
    process.env.ONCEBOX_URL = `http://127.0.0.1:${String(apiPort)}`;
    process.env.ONCEBOX_TOKEN = token;
    const sdk = (await import(join(dirname(example), "sdk-tools.js"))) as typeof import("../examples/sdk-tools.js");
    const order = { order_id: "o-20", amount: "3.00" };
    for (const id of ["call-1", "call-2"]) {
      await sdk.createInvoice.execute?.(order, { toolCallId: id, messages: [] });
      await sdk.createInvoiceTool.invoke(new RunContext(), JSON.stringify(order));
    }
    const keys = (await db.scalar(
      "SELECT array_agg(idempotency_key) FROM oncebox.intents WHERE payload->>'order_id' = 'o-20'",
    )) as string[];
    const [only, ...others] = keys;
    assert.deepEqual(others, []);
    assert.equal(await effects(only ?? ""), 1);
  } finally {
    await worker.stop();
    await api.stop();
    await receiver.stop();
    rmSync(path, { force: true });
    await db.drop();
  }
});
