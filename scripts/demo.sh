#!/usr/bin/env bash
# The main job: services up (installed if absent), then `oncebox demo` end to end with faults.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh
export DATABASE_URL=${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres}
cargo run --release --locked -q -p oncebox -- demo "$@"
