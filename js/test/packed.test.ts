// `npm pack` makes an installable tarball: a fresh project outside the repository installs it
// and uses it (the native part included).
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const js = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

test("a fresh project installs the packed tarball and uses it", async () => {
  const fresh = mkdtempSync(join(tmpdir(), "oncebox-js-fresh-"));
  try {
    const { stdout } = await run("npm", ["pack", "--silent", "--pack-destination", fresh], { cwd: js });
    const tarball = join(fresh, stdout.trim().split("\n").pop() ?? "");
    writeFileSync(join(fresh, "package.json"), JSON.stringify({ name: "fresh", private: true, type: "module" }));
    await run("npm", ["install", "--no-audit", "--no-fund", "--offline", tarball], { cwd: fresh });
    writeFileSync(
      join(fresh, "use.mjs"),
      'import { canonicalJson, requestHash } from "oncebox";\n' +
        'console.log(canonicalJson({ b: 1, a: "x" }), requestHash("a", {}).length);\n',
    );
    const used = await run(process.execPath, ["use.mjs"], { cwd: fresh });
    assert.equal(used.stdout.trim(), '{"a":"x","b":1} 64');
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
});
