#!/usr/bin/env bash
# The agent SDKs the MCP gateway is tested with, pinned, in a virtualenv of their own under
# target/ (nothing touches the system Python): LangChain's MCP adapters and the OpenAI Agents
# SDK. They need an MCP SDK older than the one scripts/pyenv.sh pins for the other tests, so
# they live apart; python/tests/agent_sdks.py runs in it as a separate process. Sourced by
# scripts/python-tests.sh; exports ONCEBOX_SDKENV, the venv's directory. Reinstalls only when the
# pins change; nothing is downloaded after that.
set -euo pipefail
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ONCEBOX_SDKENV=${ONCEBOX_SDKENV:-$_root/target/sdkenv}
_want="langchain-mcp-adapters==0.3.2 langchain-core==1.8.3 openai-agents==0.24.0 mcp==1.30.0"
if [ "$(cat "$ONCEBOX_SDKENV/.installed" 2>/dev/null)" != "$_want" ]; then
  printf '[sdkenv] installing %s into %s\n' "$_want" "$ONCEBOX_SDKENV" >&2
  rm -rf "$ONCEBOX_SDKENV"
  python3 -m venv "$ONCEBOX_SDKENV"
  # shellcheck disable=SC2086
  "$ONCEBOX_SDKENV/bin/pip" install -q --disable-pip-version-check $_want
  echo "$_want" > "$ONCEBOX_SDKENV/.installed"
fi
export ONCEBOX_SDKENV
