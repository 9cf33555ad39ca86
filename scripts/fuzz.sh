#!/usr/bin/env bash
# The long fuzz run (issue 20): every property of `tests/fuzz.rs` — the
# parsers of what an agent process can influence — with a million cases
# each (or the count given), in a release build, one property at a time.
# Prints each property's wall time and the run's peak memory. The suite runs
# the same properties with a short count on every `scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${1:-1000000}
cargo test --release --locked --test fuzz --no-run >&2
bin=$(cargo test --release --locked --test fuzz --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "fuzz" and m.get("executable"):
        print(m["executable"])')
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failed=0
for test in $("$bin" --list 2>/dev/null | sed -n 's/: test$//p'); do
  start=$(date +%s.%N)
  LOOPD_FUZZ_CASES=$cases /usr/bin/time -o "$out" -f '%x %M' "$bin" --exact "$test" --test-threads 1 >/dev/null 2>&1 || true
  end=$(date +%s.%N)
  read -r status peak < <(tail -1 "$out")
  if [ "$status" = 0 ]; then verdict=ok; else verdict="FAILED (exit $status)"; failed=1; fi
  printf '%-72s %9d cases  %7.1f s  peak RSS %6d KiB  %s\n' "$test" "$cases" "$(echo "$end - $start" | bc)" "$peak" "$verdict"
done
exit $failed
