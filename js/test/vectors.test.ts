// The known answers of crates/oncebox-core/vectors/keys.json, which the Rust and Python tests
// check too: delivery keys and tool-call keys are the same in every language.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { type Json, callIdentity, deliveryKey } from "oncebox";
import { join } from "node:path";

import { REPO } from "./support.js";

interface Vectors {
  delivery_key: { tenant: string; key: string; delivery_key: string }[];
  call_identity: {
    tool: string;
    arguments: unknown;
    pointers: string[] | null;
    window: number;
    at: number;
    previous_created: number | null;
    keys_at: string[];
    key: string;
  }[];
}

const vectors = JSON.parse(
  readFileSync(join(REPO, "crates", "oncebox-core", "vectors", "keys.json"), "utf8"),
) as Vectors;

test("delivery keys match the vectors", () => {
  assert.ok(vectors.delivery_key.length > 0);
  for (const v of vectors.delivery_key) {
    assert.equal(deliveryKey(v.tenant, v.key), v.delivery_key, JSON.stringify(v));
  }
});

test("call identities match the vectors", () => {
  assert.ok(vectors.call_identity.length > 0);
  for (const v of vectors.call_identity) {
    const identity = callIdentity({ tool: v.tool, arguments: v.arguments as Json, window: v.window, ...(v.pointers === null ? {} : { pointers: v.pointers }) });
    assert.deepEqual(identity.keysAt(v.at), v.keys_at, JSON.stringify(v));
    assert.equal(identity.keyFor(v.at, v.previous_created), v.key, JSON.stringify(v));
  }
});
