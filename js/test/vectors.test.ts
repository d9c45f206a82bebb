// The known answers of crates/oncebox-core/vectors/keys.json, which the Rust and Python tests
// check too: delivery keys and tool-call keys are the same in every language.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { deliveryKey } from "../src/index.js";
import { native } from "../src/native.js";

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
  readFileSync(new URL("../../../crates/oncebox-core/vectors/keys.json", import.meta.url), "utf8"),
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
    const identity = new native.CallIdentity(v.tool, JSON.stringify(v.arguments), v.pointers, v.window);
    assert.deepEqual(identity.keysAt(v.at), v.keys_at, JSON.stringify(v));
    assert.equal(identity.keyFor(v.at, v.previous_created), v.key, JSON.stringify(v));
  }
});
