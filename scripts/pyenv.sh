#!/usr/bin/env bash
# The Python package's build and test tools, pinned, in a virtualenv under target/ (nothing
# touches the system Python): maturin (builds python/), psycopg, SQLAlchemy and httpx (the
# extras the tests exercise), mcp (the official MCP SDK: the agent of the MCP gateway's tests),
# playwright (drives Debian's Chromium in the console's browser tests; it never downloads a browser),
# standardwebhooks and cryptography (independent verifiers of the signed deliveries),
# rfc8785 (the independent JCS implementation the hash is checked
# against), pytest, ruff and mypy. Sourced by scripts/python-tests.sh; exports ONCEBOX_PYENV, the
# venv's directory. Reinstalls only when the pins change; nothing is downloaded after that.
set -euo pipefail
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ONCEBOX_PYENV=${ONCEBOX_PYENV:-$_root/target/pyenv}
_want="maturin==1.16.0 psycopg==3.3.9 psycopg-binary==3.3.9 sqlalchemy==2.1.9 greenlet==3.5.6 \
httpx==0.28.1 rfc8785==0.1.4 mcp==2.3.0 playwright==1.65.2 standardwebhooks==1.1.0 cryptography==50.0.2 pytest==9.2.0 ruff==0.17.5 mypy==2.4.1"
if [ "$(cat "$ONCEBOX_PYENV/.installed" 2>/dev/null)" != "$_want" ]; then
  printf '[pyenv] installing %s into %s\n' "$_want" "$ONCEBOX_PYENV" >&2
  rm -rf "$ONCEBOX_PYENV"
  python3 -m venv "$ONCEBOX_PYENV"
  # shellcheck disable=SC2086
  "$ONCEBOX_PYENV/bin/pip" install -q --disable-pip-version-check $_want
  echo "$_want" > "$ONCEBOX_PYENV/.installed"
fi
export ONCEBOX_PYENV
