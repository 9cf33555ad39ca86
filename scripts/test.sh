#!/usr/bin/env bash
# The test command (README "Run the tests"; `.ci/run` calls exactly this).
# Installs what the tests need on a fresh machine — the pinned Claude Code
# and Codex CLIs from npm, pytest and ruff from PyPI, into ./.tools — then
# runs every test: unit tests and the integration tests, the fast ones with
# the scripted agent of test builds and the rest against the real CLIs; at
# the end, a per-module timing table.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where a fresh clone's time goes: each phase's seconds, printed at the end.
phase() { echo "$1 $SECONDS" >> "$phases"; }
phases=$(mktemp)
scripts/install-test-tools.sh >/dev/null
phase "tools installed"
cargo build --locked --examples
# `failpoints` compiles in the named crash points the crash walks kill at;
# `scripted-agent` the agent of the fast tests (no CLI, no node). Neither
# is ever in a build that ships.
tests=(--locked --features failpoints,scripted-agent --lib --test it --test fuzz)
cargo test "${tests[@]}" --no-run
phase "built"
binaries=$(cargo test "${tests[@]}" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        name = "unit" if "lib" in m["target"]["kind"] else m["target"]["name"]
        print(name, m["executable"])
')
# Each test binary as `cargo test` runs it, with each test's time:
# libtest's `--report-time` is unstable, so RUSTC_BOOTSTRAP=1 is set for
# these runs only (the binaries were built by stable cargo above).
logs=$(mktemp -d)
status=0
while read -r name bin; do
  echo "== $name: $bin" >&2
  if ! RUSTC_BOOTSTRAP=1 "$bin" -Z unstable-options --report-time 2>&1 | tee "$logs/$name.log"; then
    status=1
  fi
done <<< "$binaries"
phase "tested"
echo
echo "== time per module (each test's own seconds; tests run side by side) =="
python3 scripts/test-times.py "$logs"/*.log
echo
echo "== wall time per phase (seconds since the start) =="
cat "$phases"
rm -rf "$logs" "$phases"
exit $status
