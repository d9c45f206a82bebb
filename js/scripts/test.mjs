// Runs the compiled tests (build/test/*.test.js) with Node's test runner, naming each file: a
// directory argument means different things to Node 20 (every test file under it) and to Node
// 22 and later (a glob pattern, which matches only the directory), and Node 20 exits 0 when it
// finds no test file at all. Fails when there is nothing to run. Run after a clean build
// (`npm test` cleans build/ first, so that no stale compiled test from an earlier build runs).
// Arguments go to `node --test` before the files.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";

const dir = join("build", "test");
let files = [];
try {
  files = readdirSync(dir)
    .filter((f) => f.endsWith(".test.js"))
    .sort()
    .map((f) => join(dir, f));
} catch (e) {
  console.error(`no compiled tests: ${dir} cannot be read (${e.message}); build them first`);
  process.exit(1);
}
if (files.length === 0) {
  console.error(`no compiled tests under ${dir}: nothing would run`);
  process.exit(1);
}
const run = spawnSync(
  process.execPath,
  ["--test", "--test-concurrency=1", ...process.argv.slice(2), ...files],
  { stdio: "inherit" },
);
process.exit(run.status ?? 1);
