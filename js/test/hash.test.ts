// The binding's canonical JSON and request hash agree with an independent JavaScript RFC 8785
// implementation (npm's `canonicalize`) and with `oncebox hash` on 1,000 generated documents,
// and refuse what the Rust core refuses, naming the place.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";

import canonicalize from "canonicalize";

import { InvalidIntent, type Json, canonicalJson, requestHash, stepKey } from "oncebox";
import { oncebox } from "./support.js";

/** A small seeded generator (mulberry32): the same documents every run. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PIECES = ["a", "é", "Ω", "€", "😀", "\n", "\t", '"', "\\", "\u0001", "\u2028", "z", "10", " "];

function document(next: () => number, depth: number): Json {
  const pick = Math.floor(next() * (depth > 3 ? 5 : 7));
  switch (pick) {
    case 0:
      return null;
    case 1:
      return next() < 0.5;
    case 2:
      return Math.floor((next() - 0.5) * 2 * Number.MAX_SAFE_INTEGER);
    case 3:
      return (next() - 0.5) * 10 ** Math.floor(next() * 35 - 20);
    case 4:
      return Array.from({ length: Math.floor(next() * 6) }, () => PIECES[Math.floor(next() * PIECES.length)]).join("");
    case 5:
      return Array.from({ length: Math.floor(next() * 4) }, () => document(next, depth + 1));
    default: {
      const out: Record<string, Json> = {};
      for (let i = Math.floor(next() * 5); i > 0; i--) {
        const key = Array.from({ length: 1 + Math.floor(next() * 3) }, () => PIECES[Math.floor(next() * PIECES.length)]).join("");
        out[key] = document(next, depth + 1);
      }
      return out;
    }
  }
}

function documents(): Json[] {
  const next = random(35);
  return Array.from({ length: 1000 }, () => ({ doc: document(next, 0) }));
}

test("canonical JSON agrees with npm's canonicalize on 1,000 documents", () => {
  for (const doc of documents()) {
    assert.equal(canonicalJson(doc), canonicalize(doc), JSON.stringify(doc));
  }
});

test("the request hash agrees with `oncebox hash` on the same 1,000 documents", async () => {
  const docs = documents();
  for (let i = 0; i < docs.length; i += 16) {
    await Promise.all(
      docs.slice(i, i + 16).map(async (doc) => {
        const text = JSON.stringify(doc);
        const out = JSON.parse(await oncebox(["hash", "--json", "--action", "charge", "--arguments", text])) as {
          request_hash: string;
        };
        assert.equal(requestHash("charge", doc), out.request_hash, text);
        assert.equal(requestHash("charge", text), out.request_hash, text);
      }),
    );
  }
});

test("a step key is SHA-256 of session:step:tool: and the canonical arguments", () => {
  const args = { amount: "12.50", to: "acct-7" };
  const expected = createHash("sha256")
    .update(`run-1:2:transfer:${canonicalize(args) ?? ""}`)
    .digest("hex");
  assert.equal(stepKey("run-1", 2, "transfer", args), expected);
  assert.throws(() => stepKey("run-1", 1.5, "transfer", args), (e) => e instanceof InvalidIntent && e.field === "step");
});

test("integers beyond ±2^53 are refused however they are written", () => {
  const refused = (value: Json | string, field: string) => {
    assert.throws(
      () => canonicalJson(value),
      (e) => e instanceof InvalidIntent && e.field === field && e.reason.includes("2^53"),
      field,
    );
  };
  assert.equal(canonicalJson({ n: 2n ** 53n }), '{"n":9007199254740992}');
  assert.equal(canonicalJson({ n: -(2n ** 53n) }), '{"n":-9007199254740992}');
  refused({ n: 2n ** 53n + 1n }, "document/n");
  refused({ list: [1, -(2n ** 64n)] }, "document/list/1");
  refused({ n: 2 ** 53 + 2 }, "document/n");
  // JSON.parse would have rounded this one: read as text, it is refused.
  refused('{"id": 9007199254740993}', "document/id");
  refused({ "a/b": { "c~": 1e300 } }, "document/a~1b/c~0");
});

test("what JSON cannot hold is refused, not written as null", () => {
  for (const [value, field] of [
    [{ x: Number.NaN }, "document/x"],
    [{ x: [Infinity] }, "document/x/0"],
  ] as const) {
    assert.throws(() => canonicalJson(value), (e) => e instanceof InvalidIntent && e.field === field);
  }
  const cycle: Record<string, Json> = {};
  cycle.self = cycle;
  assert.throws(() => canonicalJson(cycle), (e) => e instanceof InvalidIntent && e.field === "document/self");
  assert.throws(() => canonicalJson("{\"a\": 1"), (e) => e instanceof InvalidIntent && e.field === "document");
});
