#!/usr/bin/env bash
# The TypeScript package's part of the test command (run by scripts/test.sh): build its native
# part (js/native, napi-rs) with the dev profile the Rust tests were built with, install the
# pinned dev dependencies (npm ci, from js/package-lock.json), typecheck (tsc, strict) and lint
# (ESLint with typescript-eslint), build the package, then run its tests with Node's test runner
# against the real Postgres and the oncebox binary. Expects the services up
# (scripts/services.sh) and DATABASE_URL set; installs Node.js and npm with apt-get if absent.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v npm >/dev/null 2>&1; then
    source scripts/services.sh
    install_missing nodejs npm
fi
cd js
ONCEBOX_CARGO_PROFILE=dev node scripts/build-native.mjs
npm ci --no-audit --no-fund --loglevel=error
# The package first (dist/): the examples import it by its name, as its users do.
npx tsc -p tsconfig.build.json
npx tsc --noEmit -p tsconfig.json
npx eslint .
# A clean build of the tests: a compiled test whose source is gone must not run.
rm -rf build
npx tsc -p tsconfig.json
ONCEBOX_BIN="$PWD/../target/debug/oncebox" node scripts/test.mjs "$@"
