// Intents submitted from TypeScript are delivered by `oncebox worker` exactly once each, counted
// at the reference receiver, which executes every request it gets (it does not deduplicate).
import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Intake, deliveryKey, submit } from "oncebox";
import { Proc, Scratch, freePort, waitUntil } from "./support.js";

test("20 intents from TypeScript are delivered once each by a worker", async () => {
  const db = await Scratch.create("deliver");
  const port = await freePort();
  const receiver = await Proc.start(["receiver", "--listen", `127.0.0.1:${String(port)}`], {}, port);
  const config = `[actions.create_invoice]
destination = "billing"

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:${String(port)}/invoices"
idempotency = "key"
`;
  const path = join(tmpdir(), `${db.name}.toml`);
  writeFileSync(path, config);
  const intake = Intake.fromToml(config);
  const keys = Array.from({ length: 20 }, (_, i) => `ts-${String(i)}`);
  let worker: Proc | undefined;
  try {
    for (const key of keys) {
      const client = await db.client();
      try {
        await client.query("BEGIN");
        await submit(client, { tenant: "acme", key, action: "create_invoice", arguments: { order: key, amount: "1.00" }, config: intake });
        await client.query("COMMIT");
      } finally {
        await client.end();
      }
    }
    worker = await Proc.start(["worker", "--database-url", db.url, "--config", path, "--poll-interval", "100ms"]);
    await waitUntil("every intent succeeded", async () =>
      Number(await db.scalar("SELECT count(*) FROM oncebox.intents WHERE status = 'succeeded'")) === keys.length,
    );
    assert.equal(await worker.stop(), 0);
    worker = undefined;
    for (const key of keys) {
      // The receiver knows each intent by its delivery key: acme's key.
      const sent = encodeURIComponent(deliveryKey("acme", key));
      const answer = await fetch(`http://127.0.0.1:${String(port)}/effects?key=${sent}`);
      const body = (await answer.json()) as { data: unknown[] };
      assert.equal(body.data.length, 1, key);
    }
  } finally {
    await worker?.stop();
    await receiver.stop();
    rmSync(path, { force: true });
    await db.drop();
  }
});
