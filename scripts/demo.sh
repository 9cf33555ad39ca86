#!/usr/bin/env bash
# The demo: the whole loop on the fixture repository, offline. Builds loopd,
# installs the pinned Claude Code CLI locally, starts the scripted model with
# fixtures/scenarios/demo.toml, runs `loopd run` and prints the summary:
# attempt 1 is rejected by the pre-critic (a leftover debug print, no model
# call), attempt 2 is accepted by the critic. The job is kept in your own
# state dir (`$XDG_STATE_HOME/loopd`, else ~/.local/state/loopd), where
# `loopd status` and `loopd report` find it afterwards.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
echo "building loopd and the scripted model (a first build takes a few minutes; cargo shows its progress)..." >&2
cargo build --locked --bin loopd --example scripted_model
echo "installing what the demo needs (the pinned Claude Code CLI, pytest, ruff) into ./.tools if missing..." >&2
tools_path=$(scripts/install-test-tools.sh --demo)
state_dir="${LOOPD_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/loopd}"
work=$(mktemp -d "${TMPDIR:-/tmp}/loopd-demo.XXXXXX")
fixtures/rechnung/make-repo.sh "$work/repo"
mkdir -p "$work/home"

target/debug/examples/scripted_model fixtures/scenarios/demo.toml > "$work/model.url" &
model_pid=$!
trap 'kill $model_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$work/model.url" ] && break; sleep 0.05; done
echo "scripted model: $(cat "$work/model.url"); fixture repository: $work/repo" >&2

set +e
env -i PATH="$tools_path:/usr/local/bin:/usr/bin:/bin" HOME="$work/home" \
  ANTHROPIC_BASE_URL="$(cat "$work/model.url")" ANTHROPIC_API_KEY=sk-demo-not-a-real-key \
  LOOPD_STATE_DIR="$state_dir" GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 \
  "$root/target/debug/loopd" run -C "$work/repo" --json > "$work/summary.json"
code=$?
set -e
echo
echo "== summary.json (exit code $code) =="
python3 -m json.tool "$work/summary.json"
run_dir=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_dir"])' "$work/summary.json")
echo
echo "== the prompt of attempt 2 =="
cat "$run_dir/attempt-2/prompt.txt"
echo
job=$(basename "$run_dir")
loopd="$root/target/debug/loopd"
echo "== the job is in $state_dir; look at it with =="
echo "  $loopd status --state-dir '$state_dir'"
echo "  $loopd report --state-dir '$state_dir' $job"
echo "  $loopd report --state-dir '$state_dir' --html '$work/report.html' $job   # then open that page"
exit $code
