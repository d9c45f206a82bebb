// What the package says about statuses, endings and defaults is what the core knows (the addon's
// facts), and the core's statuses are the database's.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as oncebox from "oncebox";
import { FACTS, NotSucceeded, type RemoteIntent, SETTLED, STATUSES, TERMINAL, WAITING_FOR_A_PERSON, outcome } from "oncebox";

import { Scratch } from "./support.js";

test("the statuses are the database's", async () => {
  const db = await Scratch.create("facts");
  try {
    const labels = await db.scalar("SELECT enum_range(NULL::oncebox.intent_status)::text[]");
    assert.deepEqual(STATUSES, labels);
  } finally {
    await db.drop();
  }
});

test("the sets are the core's", () => {
  assert.deepEqual([...TERMINAL].sort(), ["cancelled", "expired", "failed", "rejected", "succeeded"]);
  assert.deepEqual([...WAITING_FOR_A_PERSON].sort(), ["awaiting_approval", "needs_review"]);
  assert.deepEqual([...SETTLED].sort(), [...TERMINAL, ...WAITING_FOR_A_PERSON].sort());
});

test("each ending throws the class and the message the core names", () => {
  const exported = oncebox as unknown as Record<string, unknown>;
  for (const status of STATUSES) {
    const intent = { idempotencyKey: "k", action: "a", status, error: { detail: "402 refused" } } as unknown as RemoteIntent;
    const ending = FACTS.statuses.find((s) => s.status === status)?.ending;
    if (ending === undefined) {
      assert.equal(status, "succeeded");
      assert.equal(outcome(intent), intent);
      continue;
    }
    const error = exported[ending.error];
    assert.ok(typeof error === "function", `${ending.error} is exported`);
    let message = ending.message.replaceAll("{status}", status);
    if (ending.withDetail) {
      message += ": 402 refused";
    }
    assert.throws(
      () => outcome(intent),
      (e) => e instanceof NotSucceeded && e instanceof (error as new () => Error) && e.message === `intent "k" (a): ${message}`,
      status,
    );
  }
});

test("the client defaults and the submit parameters are the core's", () => {
  assert.deepEqual(FACTS.clientDefaults, {
    attempts: 6,
    minDelayMs: 100,
    maxDelayMs: 5000,
    timeoutMs: 30_000,
    maxWaitSeconds: 60,
    toolWaitMs: 30_000,
  });
  assert.deepEqual(FACTS.submitOrderedParams.slice(0, 4), ["tenant", "ordering_key", "destination", "skip_failed"]);
  assert.deepEqual(FACTS.submitOrderedParams.slice(4), FACTS.submitParams.slice(1));
});
