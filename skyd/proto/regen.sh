#!/usr/bin/env bash
# Regenerate skyd/proto/skyd_agent/ from agent.proto (betterproto 2.0.0b7 + grpclib).
# Needs the `proto` extra: pip install 'betterproto[compiler]==2.0.0b7' grpcio-tools
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV_BIN="${VENV_BIN:-$PWD/.venv/bin}"
export PATH="$VENV_BIN:$PATH"   # protoc looks up protoc-gen-python_betterproto on PATH
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$VENV_BIN/python" -m grpc_tools.protoc -I skyd/proto --python_betterproto_out="$tmp" skyd/proto/agent.proto
mkdir -p skyd/proto/skyd_agent
# betterproto writes skyd/agent/v1/__init__.py after the proto package; we flatten it.
# (mypy: the generated servicer passes Optional requests; not ours to fix.)
{ echo "# mypy: ignore-errors"; cat "$tmp/skyd/agent/v1/__init__.py"; } > skyd/proto/skyd_agent/__init__.py
echo "generated skyd/proto/skyd_agent/__init__.py"
