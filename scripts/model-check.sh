#!/usr/bin/env bash
# The delivery protocol's model check (crates/oncebox-model). Without arguments: the small
# models the test command checks. With --deep: Protocol::deep (the lane and the lookup intent
# with a deadline and a slow worker as well) in place of the small models; optimised, printing
# the state count and the time of each.
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
