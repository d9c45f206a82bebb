// An agent loop whose tool calls go through oncebox: a scripted model asks for three invoices,
// one step at a time. Each call's key is its run and step, so an orchestrator that crashes and
// replays the run from the start finds the intents of the steps it already took — one effect
// per step, however often it is replayed.
//
//   ONCEBOX_URL=http://127.0.0.1:8080 ONCEBOX_TOKEN=… RUN_ID=run-7 node build/examples/agent-loop.js
//
// CRASH_AFTER=N ends the process right after step N, as a crash would.
import { Client, onceboxTool } from "oncebox";

const url = process.env.ONCEBOX_URL ?? "http://127.0.0.1:8080";
const token = process.env.ONCEBOX_TOKEN ?? "";
const run = process.env.RUN_ID ?? "run-1";
const crashAfter = process.env.CRASH_AFTER === undefined ? null : Number(process.env.CRASH_AFTER);

/** The scripted model: the tool calls it makes, in order. */
const script = [
  { order_id: "o-1", amount: "12.50" },
  { order_id: "o-2", amount: "7.00" },
  { order_id: "o-3", amount: "99.90" },
];

const createInvoice = onceboxTool("create_invoice", { via: new Client(url, token), timeoutMs: 30_000 });

for (const [step, args] of script.entries()) {
  const intent = await createInvoice.execute(args, { session: run, step });
  console.log(`step ${String(step)}: ${intent.status} ${intent.idempotencyKey}`);
  if (step === crashAfter) {
    process.exit(3);
  }
}
