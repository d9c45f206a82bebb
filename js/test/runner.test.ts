// The test command's runner (scripts/test.mjs) fails when there is nothing to run, as Node 20's
// `node --test DIR` does not: a build that compiled no test must not pass as green.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { JS } from "./support.js";

const runner = join(JS, "scripts", "test.mjs");

test("the test runner fails when no compiled test is there to run", () => {
  const dir = mkdtempSync(join(tmpdir(), "oncebox-runner-"));
  try {
    const missing = spawnSync(process.execPath, [runner], { cwd: dir, encoding: "utf8" });
    assert.equal(missing.status, 1, missing.stderr);
    assert.match(missing.stderr, /no compiled tests/);
    mkdirSync(join(dir, "build", "test"), { recursive: true });
    const empty = spawnSync(process.execPath, [runner], { cwd: dir, encoding: "utf8" });
    assert.equal(empty.status, 1, empty.stderr);
    assert.match(empty.stderr, /nothing would run/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
