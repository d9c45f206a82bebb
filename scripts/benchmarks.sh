#!/usr/bin/env bash
# Every benchmark of docs/performance.md's current table, one after the other on an otherwise idle
# machine, each beside its raw baseline in the same run. Prints the stamp (date, commit, machine)
# and writes each benchmark's report to target/benchmarks/NAME.txt (the latency chart to
# target/benchmarks/latency.png). Needs the services of scripts/services.sh and pgbench.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh
export DATABASE_URL=${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres}
export AMQP_URL=${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
cargo build --release --locked -p oncebox -p oncebox-bench
out=target/benchmarks
mkdir -p "$out"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates migrations || echo ' (with local changes)')"
    echo "machine: $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo "postgres: $(psql "$DATABASE_URL" -Atc 'SHOW server_version')"
    echo "rabbitmq: $(rabbitmqctl version 2>/dev/null || echo unknown)"
} | tee "$out/stamp.txt"
bench=target/release/oncebox-bench
run() {
    local name=$1
    shift
    echo "== $name: oncebox-bench $*"
    "$bench" "$@" 2>&1 | tee "$out/$name.txt"
}
run intake intake --clients 32 --seconds 5 --rounds 3
run intake-http intake --http --clients 32 --seconds 5 --rounds 3
run deliver deliver --intents 20000
run deliver-amqp deliver --amqp --intents 20000
run latency latency --chart "$out/latency.png"
run tools tools --clients 16 --seconds 10 --rounds 3
run signing signing --intents 20000 --rounds 3
run lanes lanes --rounds 3
# In-transaction intake from Python: the package built into the pinned venv (scripts/pyenv.sh).
source scripts/pyenv.sh
export PATH="$ONCEBOX_PYENV/bin:$PATH" # maturin, for the build
"$ONCEBOX_PYENV/bin/pip" install -q --disable-pip-version-check --no-index --no-deps \
    --no-build-isolation --force-reinstall ./python
echo "== python-intake: python/bench/intake.py --clients 32 --seconds 10 --rounds 3"
"$ONCEBOX_PYENV/bin/python" python/bench/intake.py --clients 32 --seconds 10 --rounds 3 2>&1 \
    | tee "$out/python-intake.txt"
