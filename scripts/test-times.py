#!/usr/bin/env python3
"""The per-module timing table of a test run (scripts/test.sh prints it).

Reads libtest's output (`test NAME ... ok <1.234s>` lines, written with
`--report-time`) from the files named on the command line and prints, per
module, how many tests ran and the seconds they took, dearest first. The
seconds are each test's own, so with tests running side by side they add
up to more than the wall time.
"""
import re
import sys

LINE = re.compile(r"^test (\S+) \.\.\. (\w+) <([0-9.]+)s>")

def main(paths):
    modules = {}
    for path in paths:
        binary = path.rsplit("/", 1)[-1].removesuffix(".log")
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = LINE.match(line)
                if not m:
                    continue
                name, _, secs = m.groups()
                module = name.split("::")[0] if "::" in name else "(top)"
                key = f"{binary}::{module}"
                n, total, worst = modules.get(key, (0, 0.0, ("", 0.0)))
                secs = float(secs)
                if secs > worst[1]:
                    worst = (name, secs)
                modules[key] = (n + 1, total + secs, worst)
    if not modules:
        print("no per-test times were reported")
        return
    width = max(len(k) for k in modules)
    print(f"{'module':<{width}}  tests  seconds  slowest test")
    for key, (n, total, worst) in sorted(modules.items(), key=lambda kv: -kv[1][1]):
        print(f"{key:<{width}}  {n:5}  {total:7.1f}  {worst[0]} ({worst[1]:.1f} s)")
    print(f"{'all':<{width}}  {sum(v[0] for v in modules.values()):5}  {sum(v[1] for v in modules.values()):7.1f}")

if __name__ == "__main__":
    main(sys.argv[1:])
