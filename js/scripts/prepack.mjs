// Runs before `npm pack` and `npm publish`: builds what the package is made of, so that a tarball
// packed from a clean checkout works when installed — the addon for this platform (with its
// loader and types, binding/) and the TypeScript (dist/). A release sets ONCEBOX_PREBUILT=1 to
// pack the loader it built with the addons already moved to their platform packages
// (docs/contributing.md, "Releasing"); a pack without an addon for this platform anywhere is
// refused rather than made.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const js = join(dirname(fileURLToPath(import.meta.url)), "..");
const node = (args) => execFileSync(process.execPath, args, { cwd: js, stdio: "inherit" });
if (process.env.ONCEBOX_PREBUILT !== "1") {
  node([join(js, "scripts", "build-native.mjs")]);
}
if (!existsSync(join(js, "binding", "index.js"))) {
  console.error("binding/index.js is missing: build it with `npm run build:native`");
  process.exit(1);
}
const addons = readdirSync(join(js, "binding")).filter((f) => f.endsWith(".node"));
if (process.env.ONCEBOX_PREBUILT === "1" && addons.length > 0) {
  console.error(`binding/ still holds ${addons.join(", ")}: move them to npm/ (napi artifacts)`);
  process.exit(1);
}
node([join(js, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.build.json"]);
