#!/usr/bin/env bash
# Install what the tests need into ./.tools (ignored by git), idempotently:
#   - the pinned Claude Code and Codex CLIs from the npm registry, and tsx
#     (node's test runner on TypeScript, for the judging corpus),
#   - pytest and ruff from PyPI (the fixture repository's goal test),
#     pyyaml (to check the example workflow parses), and the two offline
#     schema validators of `loopd export`: kubernetes-validate (the
#     Kubernetes manifest, schemas bundled per Kubernetes version) and
#     check-jsonschema (the GitHub Actions workflow, its schema vendored).
# Prints the directories to put on PATH.
#
# `--demo` installs only what scripts/demo.sh needs: the pinned Claude Code
# CLI, pytest and ruff (no Codex CLI, no Debian packages).
#
# It also needs three Debian packages: `systemd` (for `systemd-analyze`, the
# unit file test), `chromium` (the HTML report is opened in a real
# headless browser) and `golang-go` (the judging corpus's Go tasks). It never escalates privileges on its own: as root (CI
# on a fresh Debian machine) it says what it installs and why, then runs
# apt-get; as anyone else it prints the command to run and fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/.tools"
CLAUDE_CODE_VERSION=2.1.328
CODEX_VERSION=0.171.0
PYTEST_VERSION=8.3.4
RUFF_VERSION=0.8.4
PYYAML_VERSION=6.0.2
KUBERNETES_VALIDATE_VERSION=1.37.0
CHECK_JSONSCHEMA_VERSION=0.39.0
TSX_VERSION=4.23.15
mkdir -p "$tools"
demo=
[ "${1:-}" = "--demo" ] && demo=1

# The pinned Claude Code CLI's package declares Node 22 or newer; the whole
# suite passes on Node 20 (the oldest we run it on). Older ones (Debian 12
# ships 18) are refused here, where the cause is plain, rather than at the
# CLI's first run.
node_major=$(node --version 2>/dev/null | sed -n 's/^v\([0-9]*\).*/\1/p')
if [ -z "$node_major" ]; then
  echo "error: node is missing; the pinned Claude Code CLI runs on Node.js 20 or newer (22 declared). Debian/Ubuntu: nodejs npm from NodeSource, or nvm" >&2
  exit 1
elif [ "$node_major" -lt 20 ]; then
  echo "error: node $(node --version) is too old: the pinned Claude Code CLI ($CLAUDE_CODE_VERSION) needs Node.js 20 or newer (its package declares 22; Debian 12 ships 18: use NodeSource or nvm)" >&2
  exit 1
elif [ "$node_major" -lt 22 ]; then
  echo "note: node $(node --version): the pinned Claude Code CLI's package declares Node 22 or newer; loopd's suite passes on 20" >&2
fi

# Debian packages, checked first: a missing one fails before minutes of
# downloads. `need COMMAND PACKAGE WHY` installs PACKAGE as root with apt-get
# (saying what and why), or prints the command to run and fails.
apt_updated=
need() {
  local cmd=$1 package=$2 why=$3
  command -v "$cmd" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing the Debian package $package with apt-get (running as root): $why" >&2
    if [ -z "$apt_updated" ]; then
      apt-get update -qq >&2
      apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >&2
  else
    {
      echo "error: $cmd is missing; $why."
      echo "Install the package that provides it (Debian/Ubuntu: $package), then run this again:"
      echo "    sudo apt-get install $package"
      echo "(this script never runs sudo itself)"
    } >&2
    exit 1
  fi
}
if [ -z "$demo" ]; then
  need systemd-analyze systemd "the tests run \`systemd-analyze verify\` on the units in systemd/"
  need chromium chromium "the tests open \`loopd report --html\` in headless Chromium (DOM and screenshot)"
  need go golang-go "the judging corpus's Go tasks run \`go test\` (fixtures/corpus/go)"
fi

if ! "$tools/npm/node_modules/.bin/claude" --version 2>/dev/null | grep -q "^$CLAUDE_CODE_VERSION "; then
  echo "installing @anthropic-ai/claude-code@$CLAUDE_CODE_VERSION into $tools/npm" >&2
  npm install --silent --no-audit --no-fund --prefix "$tools/npm" "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" >&2
fi
"$tools/npm/node_modules/.bin/claude" --version >&2
if [ -z "$demo" ] && ! "$tools/npm/node_modules/.bin/codex" --version 2>/dev/null | grep -q " $CODEX_VERSION\$"; then
  echo "installing @openai/codex@$CODEX_VERSION into $tools/npm" >&2
  npm install --silent --no-audit --no-fund --prefix "$tools/npm" "@openai/codex@$CODEX_VERSION" >&2
fi
[ -n "$demo" ] || "$tools/npm/node_modules/.bin/codex" --version >&2
# tsx runs node's own test runner on TypeScript (fixtures/corpus/ts).
if [ -z "$demo" ] && ! "$tools/npm/node_modules/.bin/tsx" --version 2>/dev/null | grep -q "tsx v$TSX_VERSION"; then
  echo "installing tsx@$TSX_VERSION into $tools/npm" >&2
  npm install --silent --no-audit --no-fund --prefix "$tools/npm" "tsx@$TSX_VERSION" >&2
fi


# The demo needs pytest and ruff only; the suite also needs pyyaml and the
# export validators.
py_packages=("pytest==$PYTEST_VERSION" "ruff==$RUFF_VERSION")
[ -n "$demo" ] || py_packages+=("pyyaml==$PYYAML_VERSION" \
  "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" \
  "check-jsonschema==$CHECK_JSONSCHEMA_VERSION")
if ! "$tools/venv/bin/python" -m pytest --version >/dev/null 2>&1 \
   || ! "$tools/venv/bin/ruff" --version 2>/dev/null | grep -q "$RUFF_VERSION" \
   || { [ -z "$demo" ] && {
        ! "$tools/venv/bin/python" -c "import yaml" >/dev/null 2>&1 \
        || ! "$tools/venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q "$KUBERNETES_VALIDATE_VERSION" \
        || ! "$tools/venv/bin/check-jsonschema" --version 2>/dev/null | grep -q "$CHECK_JSONSCHEMA_VERSION"; }; }; then
  echo "installing ${py_packages[*]} into $tools/venv" >&2
  python3 -m venv "$tools/venv"
  "$tools/venv/bin/pip" install --quiet --disable-pip-version-check "${py_packages[@]}" >&2
fi
echo "$tools/npm/node_modules/.bin:$tools/venv/bin"
