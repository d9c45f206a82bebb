#!/usr/bin/env bash
# The TypeScript package's part of the test command (run by scripts/test.sh): install the pinned
# dev dependencies (npm ci, from js/package-lock.json; no install scripts), build the native part
# (js/native, napi-rs, through @napi-rs/cli, which also generates its loader and types) with the
# dev profile, typecheck (tsc, strict) and lint (ESLint with typescript-eslint), compile the
# tests; then pack the package as a user gets it (`npm pack`, whose prepack builds it), install
# the tarball into a fresh project outside the repository, and run the compiled tests there —
# against the installed package, with no `cargo` on PATH — with Node's test runner, against the
# real Postgres and the oncebox binary. Expects the services up (scripts/services.sh) and
# DATABASE_URL set; installs Node.js and npm with apt-get if absent.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if ! command -v npm >/dev/null 2>&1; then
    source scripts/services.sh
    install_missing nodejs npm
fi
cd js
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
export ONCEBOX_CARGO_PROFILE=dev
node scripts/build-native.mjs
# The package first (dist/): the tests and examples import it by its name, as its users do.
npx tsc -p tsconfig.build.json
npx tsc --noEmit -p tsconfig.json
npx eslint .
# A clean build of the tests: a compiled test whose source is gone must not run.
rm -rf build
npx tsc -p tsconfig.json

# As a user installs it: the tarball `npm pack` makes from this tree, in a project of its own.
fresh=$(mktemp -d "${TMPDIR:-/tmp}/oncebox-js-installed-XXXXXX")
trap 'rm -rf "$fresh"' EXIT
tarball=$(npm pack --silent --pack-destination "$fresh" | tail -n 1)
printf '[js] %s: %s bytes packed, %s bytes unpacked\n' "$tarball" \
    "$(stat -c %s "$fresh/$tarball")" "$(tar -xzOf "$fresh/$tarball" | wc -c)" >&2
# The project depends on the tarball alone (installed by npm, offline: it needs nothing else);
# the tests' own dependencies (pg, drizzle-orm, the agent SDKs…) are linked in from js/.
printf '{"name":"oncebox-installed","private":true,"type":"module","dependencies":{"oncebox":"file:./%s"}}\n' \
    "$tarball" > "$fresh/package.json"
(cd "$fresh" && npm install --offline --no-audit --no-fund --loglevel=error)
for dep in node_modules/* node_modules/@*/*; do
    case "$dep" in node_modules/@*/*) mkdir -p "$fresh/$(dirname "$dep")" ;; node_modules/@*) continue ;; esac
    [ -e "$fresh/$dep" ] || ln -s "$PWD/$dep" "$fresh/$dep"
done
cp -r build "$fresh/build"
cp scripts/test.mjs "$fresh/test.mjs"
# No cargo: the installed package must not need a Rust toolchain.
nocargo=$(printf '%s' "$PATH" | tr ':' '\n' | while read -r dir; do
    [ -n "$dir" ] && [ ! -x "$dir/cargo" ] && printf '%s:' "$dir"; done)
cd "$fresh"
PATH="${nocargo%:}" bash -c '! command -v cargo >/dev/null' || { echo "cargo still on PATH" >&2; exit 1; }
PATH="${nocargo%:}" ONCEBOX_REPO="$root" ONCEBOX_BIN="$root/target/debug/oncebox" \
    node test.mjs "$@"
