#!/usr/bin/env bash
# Fuzzes oncebox's parsers, each for a bounded time (default 60 s): the Idempotency-Key header,
# the intake's JSON path (text read exactly, the integer and NUL checks, redaction, the request
# hash) and the configuration loader. The bodies are oncebox_core::fuzzing; the targets are in
# fuzz/. Needs the nightly toolchain and cargo-fuzz, both installed here when missing.
#
#   scripts/fuzz.sh [SECONDS_EACH] [TARGET...]
#
# An input that fails is copied to fuzz/regressions/<target>/ and the script exits 1: commit the
# file, fix the cause, and the test suite (crates/oncebox-core/tests/fuzz_corpus.rs) runs it from
# then on. The seed corpus in fuzz/corpus/ is never changed by a run.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(idempotency_key intake_json config)

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
cargo +nightly fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked

failed=0
for target in "${targets[@]}"; do
  work=$(mktemp -d)
  cp "fuzz/corpus/$target"/* "$work"/
  echo "== fuzzing $target for ${seconds}s"
  if ! cargo +nightly fuzz run "$target" "$work" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1; then
    failed=1
  fi
  for found in "fuzz/artifacts/$target"/*; do
    if [ -f "$found" ]; then
      cp "$found" "fuzz/regressions/$target/"
      echo "!! $target failed on $found: kept in fuzz/regressions/$target/"
    fi
  done
  rm -rf "$work"
done
exit "$failed"
