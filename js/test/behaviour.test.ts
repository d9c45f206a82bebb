// The client behaviour fixture (tests/fixtures/client-behaviour.json), run against a scripted
// server: what the Rust and Python clients are held to as well.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import { join } from "node:path";
import { test } from "node:test";

import { ApiError, Client, InvalidIntent, type Json, type RemoteIntent, TransportError } from "oncebox";

import { REPO } from "./support.js";

interface Answer {
  drop?: boolean;
  status?: number;
  headers?: Record<string, string>;
  intent?: Record<string, unknown>;
  problem?: Record<string, unknown>;
}

interface Case {
  name: string;
  call: { op: string; key: string; action?: string; arguments?: Json; timeout_s?: number };
  retry: { attempts: number; min_delay_ms: number; max_delay_ms: number };
  answers: Answer[];
  expect: {
    requests: number;
    paths?: string[];
    same_key_and_body?: boolean;
    waits?: number[];
    min_elapsed_ms?: number;
    status?: string;
    created?: boolean;
    error?: { kind: string; status?: number; field?: string };
  };
}

const fixture = JSON.parse(readFileSync(join(REPO, "tests", "fixtures", "client-behaviour.json"), "utf8")) as {
  intent: Record<string, unknown>;
  cases: Case[];
};

interface Seen {
  method: string;
  target: string;
  key: string | undefined;
  body: string;
}

async function scripted(c: Case): Promise<{ url: string; seen: Seen[]; close: () => void }> {
  const seen: Seen[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      const key = req.headers["idempotency-key"];
      seen.push({ method: req.method ?? "", target: req.url ?? "", key: typeof key === "string" ? key : undefined, body });
      const answer = c.answers[Math.min(seen.length, c.answers.length) - 1] ?? {};
      if (answer.drop === true) {
        req.socket.destroy();
        return;
      }
      const doc =
        answer.intent === undefined
          ? { status: answer.status, ...answer.problem }
          : { ...fixture.intent, idempotency_key: c.call.key, ...answer.intent };
      res.writeHead(answer.status ?? 500, { "content-type": "application/json", ...answer.headers });
      res.end(JSON.stringify(doc));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  return {
    url: `http://127.0.0.1:${String(port)}`,
    seen,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

async function run(client: Client, call: Case["call"]): Promise<[RemoteIntent, boolean | null]> {
  switch (call.op) {
    case "submit": {
      const submitted = await client.submit(call.key, { action: call.action ?? "", arguments: call.arguments ?? {} });
      return [submitted.intent, submitted.created];
    }
    case "get":
      return [await client.get(call.key), null];
    case "cancel":
      return [await client.cancel(call.key), null];
    default:
      assert.equal(call.op, "wait");
      return [await client.wait(call.key, (call.timeout_s ?? 0) * 1000), null];
  }
}

const KINDS: Record<string, new (...args: never[]) => Error> = { ApiError, TransportError, InvalidIntent };

for (const c of fixture.cases) {
  test(`fixture: ${c.name}`, async () => {
    const server = await scripted(c);
    try {
      const client = new Client(server.url, "token", {
        timeoutMs: 5000,
        retry: { attempts: c.retry.attempts, minDelayMs: c.retry.min_delay_ms, maxDelayMs: c.retry.max_delay_ms },
      });
      const expect = c.expect;
      const started = Date.now();
      if (expect.error !== undefined) {
        const want = expect.error;
        const kind = KINDS[want.kind];
        assert.ok(kind !== undefined, want.kind);
        await assert.rejects(run(client, c.call), (e) => {
          assert.ok(e instanceof kind, `${String(e)} is a ${want.kind}`);
          const got = e as Error & { status?: number; field?: string | null };
          if (want.status !== undefined) {
            assert.equal(got.status, want.status);
          }
          if (want.field !== undefined) {
            assert.equal(got.field, want.field);
          }
          return true;
        });
      } else {
        const [intent, created] = await run(client, c.call);
        assert.equal(intent.status, expect.status);
        if (expect.created !== undefined) {
          assert.equal(created, expect.created);
        }
      }
      const elapsed = Date.now() - started;
      const seen = server.seen;
      assert.equal(seen.length, expect.requests, JSON.stringify(seen.map((s) => s.target)));
      const paths = expect.paths ?? [];
      seen.forEach((request, n) => {
        const want = paths[Math.min(n, paths.length - 1)];
        if (want !== undefined) {
          assert.equal(`${request.method} ${request.target.split("?")[0] ?? ""}`, want);
        }
      });
      if (expect.same_key_and_body === true) {
        assert.deepEqual(new Set(seen.map((s) => `${String(s.key)} ${s.body}`)).size, 1);
        assert.equal(seen[0]?.key, `"${c.call.key}"`);
      }
      if (expect.waits !== undefined) {
        assert.deepEqual(
          seen.map((s) => Number(new URL(s.target, server.url).searchParams.get("wait"))),
          expect.waits,
        );
      }
      assert.ok(elapsed >= (expect.min_elapsed_ms ?? 0), `${String(elapsed)} ms`);
    } finally {
      server.close();
    }
  });
}
