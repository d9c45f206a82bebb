#!/usr/bin/env bash
# The Python package's part of the test command (run by scripts/test.sh): build and install
# python/ into the pinned venv (scripts/pyenv.sh) offline, lint and type-check it (ruff, mypy
# --strict), then pytest against the real Postgres and the Rust binaries; the agent SDKs'
# tests drive them in a venv of their own (scripts/sdkenv.sh). Expects the services
# up (scripts/services.sh) and DATABASE_URL set.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pyenv.sh
source scripts/sdkenv.sh
export PATH="$ONCEBOX_PYENV/bin:$PATH"
# The extension is built by maturin through cargo, in the workspace's target/ with the dev
# profile the Rust tests were just built with: most of its dependencies are built already (a
# release build would compile them all again, minutes on a cold machine). Users' installs build
# it optimised (maturin's default); the tests measure no speed.
MATURIN_PEP517_ARGS="--profile dev" \
  pip install -q --disable-pip-version-check --no-index --no-deps --no-build-isolation \
  --force-reinstall ./python
# The certified OpenID provider the console's sign-in tests run (tests/oidc: oidc-provider,
# pinned by its lockfile), with Node.js and npm from Debian when absent.
if ! command -v npm >/dev/null 2>&1; then
    source scripts/services.sh
    install_missing nodejs npm
fi
(cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error)
ruff check --config python/pyproject.toml python examples/python
ruff format --check --config python/pyproject.toml python examples/python
(cd python && mypy oncebox tests bench ../examples/python)
# The binary the Rust tests built (the same features: a no-op after scripts/test.sh's cargo
# test; `cargo build -p oncebox` would unify other features and rebuild half the tree).
cargo test --workspace --locked --no-run
ONCEBOX_BIN="$PWD/target/debug/oncebox" pytest -q -p no:cacheprovider python/tests "$@"
