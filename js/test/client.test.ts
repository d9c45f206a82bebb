// The HTTP client: a submit whose answer is lost after the server committed is sent again with
// the same key and bytes and makes one intent; 5xx and 429 are retried (Retry-After honoured),
// refusals never; get, wait and cancel against a real `oncebox serve`.
import assert from "node:assert/strict";
import { rmSync, writeFileSync } from "node:fs";
import { type IncomingHttpHeaders, createServer } from "node:http";
import { type Socket, connect, createServer as createTcpServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { ApiError, Client, InvalidIntent } from "oncebox";
import { Proc, Scratch, freePort, oncebox } from "./support.js";

/** A TCP proxy to `port` that loses the answers on its first `drop` connections: it reads the
 * server's answer (the server has acted) and closes the client's connection instead. */
async function lossyProxy(port: number, drop: number): Promise<{ url: string; dropped: () => number; close: () => void }> {
  let connections = 0;
  let dropped = 0;
  const server = createTcpServer((client: Socket) => {
    const lose = connections++ < drop;
    const upstream = connect(port, "127.0.0.1");
    client.pipe(upstream);
    upstream.on("data", (chunk: Buffer) => {
      if (lose) {
        dropped++;
        client.destroy();
        upstream.destroy();
      } else {
        client.write(chunk);
      }
    });
    upstream.on("end", () => client.end());
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const listening = typeof address === "object" && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${String(listening)}`,
    dropped: () => dropped,
    close: () => server.close(),
  };
}

test("a lost answer is sent again with the same key and makes one intent; get, wait, cancel", async () => {
  const db = await Scratch.create("client");
  const port = await freePort();
  const path = join(tmpdir(), `${db.name}.toml`);
  writeFileSync(
    path,
    '[actions.create_invoice]\ndestination = "billing"\n\n[destinations.billing]\nkind = "http"\nurl = "http://127.0.0.1:9/invoices"\nidempotency = "key"\n',
  );
  const serve = await Proc.start(
    ["serve", "--database-url", db.url, "--config", path, "--listen", `127.0.0.1:${String(port)}`],
    {},
    port,
  );
  const proxy = await lossyProxy(port, 1);
  try {
    const token = (await oncebox(["ops", "token", "create", "--tenant", "acme"], { DATABASE_URL: db.url })).trim();
    const client = new Client(proxy.url, token, { retry: { minDelayMs: 50 } });
    const submitted = await client.submit("inv/1", { action: "create_invoice", arguments: { amount: "12.50" } });
    assert.equal(proxy.dropped(), 1, "the first answer was lost");
    assert.equal(submitted.created, false, "the retry found the intent the lost answer created");
    assert.equal(submitted.intent.status, "pending");
    assert.equal(Number(await db.scalar("SELECT count(*) FROM oncebox.intents")), 1);

    const got = await client.get("inv/1");
    assert.equal(got.idempotencyKey, "inv/1");
    // Nobody delivers: a short wait returns the intent still pending.
    assert.equal((await client.wait("inv/1", 1000)).status, "pending");
    assert.equal((await client.cancel("inv/1")).status, "cancelled");
    assert.equal((await client.wait("inv/1", 60_000)).status, "cancelled");
    // Keys that would change the path are refused before anything is sent; the others are one
    // encoded path segment.
    for (const key of [".", "..", "", "a\u0000b", "k".repeat(256)]) {
      await assert.rejects(client.get(key), (e) => e instanceof InvalidIntent && e.field === "idempotency_key", key);
    }
    for (const key of ["50%", "a/../b", "x?y#z"]) {
      await assert.rejects(client.get(key), (e) => e instanceof ApiError && e.status === 404, key);
    }
    await assert.rejects(
      client.submit("inv/2", { action: "nope", arguments: {} }),
      (e) => e instanceof ApiError && e.status === 422 && e.field === "action",
    );
  } finally {
    proxy.close();
    await serve.stop();
    rmSync(path, { force: true });
    await db.drop();
  }
});

test("5xx and 429 are retried with the same key and bytes, honouring Retry-After; a refusal is not", async () => {
  const seen: { headers: IncomingHttpHeaders; body: string }[] = [];
  const answers = [
    { status: 503, headers: {}, body: '{"status":503,"title":"Service Unavailable","detail":"busy"}' },
    { status: 429, headers: { "retry-after": "1" }, body: '{"status":429,"title":"Too Many Requests","detail":"slow down"}' },
    {
      status: 202,
      headers: {},
      body: '{"idempotency_key":"k","action":"a","status":"pending","request_hash":"h","attempt_count":0,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}',
    },
    { status: 422, headers: {}, body: '{"status":422,"title":"Unprocessable Entity","detail":"no such action","field":"action"}' },
  ];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      seen.push({ headers: req.headers, body });
      const answer = answers[Math.min(seen.length - 1, answers.length - 1)] ?? answers[0];
      if (answer !== undefined) {
        res.writeHead(answer.status, { "content-type": "application/json", ...answer.headers });
        res.end(answer.body);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  try {
    const client = new Client(`http://127.0.0.1:${String(port)}`, "t", { retry: { minDelayMs: 10, maxDelayMs: 2000 } });
    const started = Date.now();
    const submitted = await client.submit("k", { action: "a", arguments: { n: 2n ** 40n } });
    assert.equal(submitted.created, true);
    assert.equal(seen.length, 3);
    assert.ok(Date.now() - started >= 1000, "the Retry-After second was waited");
    assert.deepEqual(new Set(seen.map((s) => s.headers["idempotency-key"])), new Set(['"k"']));
    assert.deepEqual(new Set(seen.map((s) => s.body)), new Set(['{"action":"a","arguments":{"n":1099511627776}}']));
    await assert.rejects(client.submit("k2", { action: "a", arguments: {} }), (e) => e instanceof ApiError && e.field === "action");
    assert.equal(seen.length, 4, "a refusal is not retried");
  } finally {
    server.close();
  }
});
