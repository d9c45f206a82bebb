// The README's example, run as written against a scratch database.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { JS as js, Scratch } from "./support.js";

test("the repository README's TypeScript lines are the package README's", () => {
  const top = readFileSync(join(js, "..", "README.md"), "utf8");
  const lines = /\*\*From TypeScript\*\*[\s\S]*?```js\n([\s\S]*?)```/.exec(top)?.[1];
  const own = /```js\n([\s\S]*?)```/.exec(readFileSync(join(js, "README.md"), "utf8"))?.[1];
  assert.ok(lines !== undefined && own !== undefined, "both READMEs have the example");
  assert.ok(own.includes(lines), "the lines the repository README shows run in the package's example");
  const book = /```js\n([\s\S]*?)```/.exec(readFileSync(join(js, "..", "docs", "typescript.md"), "utf8"))?.[1];
  assert.equal(book, own, "the book's example is the package README's");
});

test("the README's SDK example is examples/sdk-tools.ts, which the agent test runs", () => {
  const block = /```ts\n([\s\S]*?)```/.exec(readFileSync(join(js, "README.md"), "utf8"))?.[1];
  assert.equal(block, readFileSync(join(js, "examples", "sdk-tools.ts"), "utf8"));
});

test("the README's submit example runs as written", async () => {
  const readme = readFileSync(join(js, "README.md"), "utf8");
  const example = /```js\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(example !== undefined, "a js block in the README");
  const db = await Scratch.create("readme");
  try {
    await db.scalar("CREATE TABLE orders (id text PRIMARY KEY, total numeric)");
    // Beside the compiled tests, so that "oncebox" and "pg" resolve as the tests' own imports do.
    const dir = join(dirname(fileURLToPath(import.meta.url)), "..", "readme");
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, "oncebox.toml"),
      '[actions.create_invoice]\ndestination = "billing"\n\n[destinations.billing]\nkind = "http"\nurl = "http://127.0.0.1:9/invoices"\nidempotency = "key"\n',
    );
    writeFileSync(join(dir, "example.mjs"), example);
    const { stdout } = await promisify(execFile)(process.execPath, ["example.mjs"], {
      cwd: dir,
      env: { ...process.env, DATABASE_URL: db.url },
    });
    assert.equal(stdout.trim(), "pending true");
    assert.equal(
      await db.scalar(
        "SELECT count(*)::int FROM oncebox.intents i JOIN orders o ON o.id = 'o-17' WHERE i.idempotency_key = 'invoice-o-17'",
      ),
      1,
    );
  } finally {
    await db.drop();
  }
});
