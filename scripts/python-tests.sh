#!/usr/bin/env bash
# The Python package's part of the test command (run by scripts/test.sh): build python/ as the
# abi3 wheel users install, install it offline with no cargo on PATH (into a bare venv, and into
# the pinned test venv, scripts/pyenv.sh), hold the native module's stub to it (stubtest), lint
# and type-check the package (ruff, mypy --strict), then pytest against the installed wheel, the
# real Postgres and the Rust binaries; the agent SDKs' tests drive them in a venv of their own
# (scripts/sdkenv.sh). Expects the services
# up (scripts/services.sh) and DATABASE_URL set.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pyenv.sh
source scripts/sdkenv.sh
export PATH="$ONCEBOX_PYENV/bin:$PATH"
# The package is built as it is shipped, an abi3 wheel (one wheel for every CPython from 3.10),
# by maturin through cargo, in the workspace's target/ with the dev profile the Rust tests were
# just built with: most of its dependencies are built already (a release build would compile
# them all again, minutes on a cold machine; a release builds it optimised, docs/contributing.md).
# The wheel is then installed with no `cargo` on PATH — into a bare venv, where it must import
# with nothing else, and into the test venv, where the tests run against it, not the sources.
wheels=$(mktemp -d "${TMPDIR:-/tmp}/oncebox-wheel-XXXXXX")
trap 'rm -rf "$wheels"' EXIT
maturin build --quiet --locked --profile dev --manifest-path python/Cargo.toml --out "$wheels"
wheel=$(ls "$wheels"/oncebox-*.whl)
printf '[python] %s: %s bytes\n' "$(basename "$wheel")" "$(stat -c %s "$wheel")" >&2
case "$wheel" in *-abi3-manylinux*) ;; *) echo "not an abi3 manylinux wheel: $wheel" >&2; exit 1 ;; esac
nocargo=$(printf '%s' "$PATH" | tr ':' '\n' | while read -r dir; do
    [ -n "$dir" ] && [ ! -x "$dir/cargo" ] && printf '%s:' "$dir"; done)
nocargo=${nocargo%:}
PATH="$nocargo" bash -c '! command -v cargo >/dev/null' || { echo "cargo still on PATH" >&2; exit 1; }
python3 -m venv "$wheels/bare"
PATH="$nocargo" "$wheels/bare/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
PATH="$nocargo" "$wheels/bare/bin/python" -c 'import oncebox; assert oncebox.Status.SUCCEEDED == "succeeded"'
PATH="$nocargo" pip install -q --disable-pip-version-check --no-index --no-deps --force-reinstall "$wheel"
# The native module's stub, held to the built module.
(cd "$wheels" && PATH="$nocargo" python -m mypy.stubtest oncebox._native)
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
# `import oncebox` is the installed wheel (python/oncebox, without the built module, is never on
# sys.path), and no test finds a cargo.
PATH="$nocargo" ONCEBOX_BIN="$PWD/target/debug/oncebox" pytest -q -p no:cacheprovider python/tests "$@"
