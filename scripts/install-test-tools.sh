#!/usr/bin/env bash
# Install what the tests need into ./.tools (ignored by git), idempotently:
#   - the pinned Claude Code CLI from the npm registry,
#   - pytest and ruff from PyPI (the fixture repository's goal test), and
#     pyyaml (to check the example workflow parses).
# Prints the directories to put on PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
CLAUDE_CODE_VERSION=2.1.328
PYTEST_VERSION=8.3.4
RUFF_VERSION=0.8.4
PYYAML_VERSION=6.0.2
mkdir -p "$tools"

if ! "$tools/npm/node_modules/.bin/claude" --version 2>/dev/null | grep -q "^$CLAUDE_CODE_VERSION "; then
  echo "installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into $tools/npm" >&2
  npm install --silent --no-audit --no-fund --prefix "$tools/npm" "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" >&2
fi
"$tools/npm/node_modules/.bin/claude" --version >&2

if ! "$tools/venv/bin/python" -m pytest --version >/dev/null 2>&1 \
   || ! "$tools/venv/bin/ruff" --version 2>/dev/null | grep -q "$RUFF_VERSION" \
   || ! "$tools/venv/bin/python" -c "import yaml" >/dev/null 2>&1; then
  echo "installing pytest==$PYTEST_VERSION ruff==$RUFF_VERSION pyyaml==$PYYAML_VERSION into $tools/venv" >&2
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "pytest==$PYTEST_VERSION" "ruff==$RUFF_VERSION" "pyyaml==$PYYAML_VERSION" >&2
fi
# systemd-analyze, for `systemd-analyze verify` of the units in systemd/.
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "installing systemd (for systemd-analyze)" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends systemd >&2
fi
echo "$tools/npm/node_modules/.bin:$tools/venv/bin"
