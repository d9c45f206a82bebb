// Builds the addon (js/native, napi-rs) with `napi build` from @napi-rs/cli, which runs cargo and
// writes, into binding/: the addon for this platform (oncebox.<platform>.node), the loader that
// finds it — beside itself, else in this platform's package (oncebox-linux-x64-gnu and the
// others the "napi" section of package.json declares) — and its types (index.d.ts), generated
// from the Rust. ONCEBOX_CARGO_PROFILE picks the profile (default dist: optimised, without debug
// information, as a release ships it; the test command uses dev, sharing the Rust tests' build);
// CARGO_TARGET_DIR is honoured.
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const js = join(dirname(fileURLToPath(import.meta.url)), "..");
const profile = process.env.ONCEBOX_CARGO_PROFILE ?? "dist";
const napi = join(js, "node_modules", "@napi-rs", "cli", "dist", "cli.js");
execFileSync(
  process.execPath,
  [
    napi,
    "build",
    "--platform",
    "--esm",
    "--no-const-enum",
    "--manifest-path",
    "native/Cargo.toml",
    "--package-json-path",
    "package.json",
    "--output-dir",
    "binding",
    "--js",
    "index.js",
    "--dts",
    "index.d.ts",
    // `napi build` finds the addon under the target's profile directory, which for cargo's dev
    // profile is `debug`: the dev profile is cargo's default, and only release is named.
    ...(profile === "dev" ? [] : ["--profile", profile]),
    "--target-dir",
    process.env.CARGO_TARGET_DIR ?? join(js, "..", "target"),
    "--",
    "--locked",
  ],
  { cwd: js, stdio: "inherit" },
);
