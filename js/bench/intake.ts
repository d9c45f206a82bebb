// In-transaction intake from node-postgres against the same two rows written raw by
// node-postgres, in one run. Each case runs `--clients` connections (one async loop each) for
// `--seconds`, alternating for `--rounds` rounds in one scratch database:
//
// - oncebox: BEGIN; submit(client, …); COMMIT — validation, the request hash and the Rust
//   store's statement, as an orchestrator runs it;
// - raw: BEGIN; the journal insert and the outbox insert as one statement, binding tenant, key,
//   action, hash and payload; COMMIT — what writing the rows by hand costs (the goal: 0.8×);
// - raw_prepared: the same, as a named statement node-postgres prepares once per connection
//   (as `submit` does its own).
//
// It prints intents/s per round and the ratio of the medians. From js/, after a release build
// of the addon (npm run build:native) and of the package and tests (npx tsc -p tsconfig.json):
//
//   node build/bench/intake.js --clients 32 --seconds 8 --rounds 3
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";

import pg from "pg";

import { Intake, requestHash, submit } from "oncebox";

const { values } = parseArgs({
  options: {
    clients: { type: "string", default: "32" },
    seconds: { type: "string", default: "8" },
    rounds: { type: "string", default: "3" },
    "database-url": { type: "string", default: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres" },
    "oncebox-bin": { type: "string", default: "../target/release/oncebox" },
  },
});
const clients = Number(values.clients);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
for (const [name, n] of [["clients", clients], ["seconds", seconds], ["rounds", rounds]] as const) {
  if (!(Number.isFinite(n) && n > 0)) {
    throw new Error(`--${name} must be a positive number`);
  }
}

const CONFIG = `[actions.create_invoice]
destination = "billing"

[destinations.billing]
kind = "http"
url = "http://127.0.0.1:9/invoices"
idempotency = "key"
`;
const ARGUMENTS = { order_id: "order-8172", amount: "12500.00", currency: "RUB" };
const HASH = requestHash("create_invoice", ARGUMENTS);
const PAYLOAD = JSON.stringify(ARGUMENTS);
const RAW = `WITH j AS (
  INSERT INTO oncebox.intents (tenant_id, idempotency_key, action, request_hash, payload)
  VALUES ($1, $2, $3, $4, $5)
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING RETURNING id, tenant_id)
INSERT INTO oncebox.outbox (intent_id, phase, tenant_id) SELECT id, 'deliver', tenant_id FROM j`;

const intake = Intake.fromToml(CONFIG);
const server = values["database-url"];
const name = `oncebox_jsbench_${randomBytes(4).toString("hex")}`;
const url = new URL(server);
url.pathname = `/${name}`;

type Case = (client: pg.Client, key: string) => Promise<unknown>;
const cases: Record<string, Case> = {
  oncebox: (client, key) => submit(client, { tenant: "bench", key, action: "create_invoice", arguments: ARGUMENTS, config: intake, notify: false }),
  raw: (client, key) => client.query(RAW, ["bench", key, "create_invoice", HASH, PAYLOAD]),
  raw_prepared: (client, key) =>
    client.query({ name: "raw_intake", text: RAW, values: ["bench", key, "create_invoice", HASH, PAYLOAD] }),
};

async function run(label: string, body: Case, connections: pg.Client[]): Promise<number> {
  const until = Date.now() + seconds * 1000;
  let done = 0;
  await Promise.all(
    connections.map(async (client, c) => {
      for (let i = 0; Date.now() < until; i++) {
        await client.query("BEGIN");
        await body(client, `${label}-${String(c)}-${String(i)}-${randomBytes(4).toString("hex")}`);
        await client.query("COMMIT");
        done++;
      }
    }),
  );
  return done / seconds;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

const admin = new pg.Client({ connectionString: server });
await admin.connect();
await admin.query(`CREATE DATABASE ${name}`);
try {
  execFileSync(values["oncebox-bin"], ["migrate"], { env: { ...process.env, DATABASE_URL: url.toString() } });
  const connections = await Promise.all(
    Array.from({ length: clients }, async () => {
      const client = new pg.Client({ connectionString: url.toString() });
      await client.connect();
      return client;
    }),
  );
  const rates: Record<string, number[]> = { oncebox: [], raw: [], raw_prepared: [] };
  for (let round = 1; round <= rounds; round++) {
    for (const [label, body] of Object.entries(cases)) {
      const rate = await run(label, body, connections);
      rates[label]?.push(rate);
      console.log(`round ${String(round)} ${label}: ${rate.toFixed(0)} intents/s`);
    }
  }
  await Promise.all(connections.map((c) => c.end()));
  const [ours, raw, prepared] = [rates.oncebox, rates.raw, rates.raw_prepared].map((r) => median(r ?? []));
  const ratio = (a = 0, b = 1) => (a / b).toFixed(2);
  console.log(
    `median: oncebox ${(ours ?? 0).toFixed(0)}/s; raw ${(raw ?? 0).toFixed(0)}/s (${ratio(ours, raw)}x); ` +
      `raw prepared ${(prepared ?? 0).toFixed(0)}/s (${ratio(ours, prepared)}x)`,
  );
} finally {
  await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
  await admin.end();
}
