// Builds the addon (js/native, napi-rs) with cargo and puts it where the package loads it:
// js/oncebox.node. ONCEBOX_CARGO_PROFILE picks the profile (default release; the test command
// uses dev, sharing the Rust tests' build); CARGO_TARGET_DIR is honoured.
import { execFileSync } from "node:child_process";
import { copyFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const js = join(dirname(fileURLToPath(import.meta.url)), "..");
const root = join(js, "..");
const profile = process.env.ONCEBOX_CARGO_PROFILE ?? "release";
execFileSync("cargo", ["build", "--locked", "-p", "oncebox-node", "--profile", profile], {
  cwd: root,
  stdio: "inherit",
});
const library = {
  darwin: "liboncebox_node.dylib",
  win32: "oncebox_node.dll",
}[process.platform] ?? "liboncebox_node.so";
const target = process.env.CARGO_TARGET_DIR ?? join(root, "target");
copyFileSync(join(target, profile === "dev" ? "debug" : profile, library), join(js, "oncebox.node"));
