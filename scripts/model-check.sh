#!/usr/bin/env bash
# The delivery protocol's model check (crates/oncebox-model). Without arguments: the small
# bounds the test command checks. With --deep: deeper bounds (Protocol::deep: three intents, more
# losses, lease expiries and attempts), optimised, printing the state count and the time.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
--deep) export ONCEBOX_MODEL_BOUNDS=deep ;;
"") ;;
*)
    echo "usage: scripts/model-check.sh [--deep]" >&2
    exit 2
    ;;
esac
cargo test --release --locked -p oncebox-model --test check -- --nocapture
