#!/usr/bin/env python3
"""Prints where a CI run's time went: the phase table .ci/run recorded and the slowest tests.

usage: scripts/ci-times.py PHASES_TSV CTEST_LOG [N]

PHASES_TSV holds one line per phase, "name<TAB>seconds<TAB>status", as .ci/run writes it.
CTEST_LOG is ctest's own console output (the lines "  3/250 Test  #12: name ....   Passed   1.23 sec").
N is how many of the slowest tests to list (default 15).
"""
import re
import sys

LINE = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (.+?) \.+\s*(\S.*?)\s+([0-9.]+) sec\s*$")


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        n = int(argv[3]) if len(argv) > 3 else 15
        if n < 1:
            raise ValueError
    except ValueError:
        print(f"ci-times: N must be a positive whole number, found '{argv[3]}'", file=sys.stderr)
        return 2
    phases = []
    try:
        with open(argv[1], encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split("\t")
                if len(parts) == 3:
                    phases.append((parts[0], float(parts[1]), parts[2]))
    except OSError as e:
        print(f"ci-times: no phase record ({e})")
    total = sum(p[1] for p in phases if "(beside" not in p[0])
    print("ci: phase                      seconds  status")
    for name, secs, status in phases:
        print(f"ci: {name:<26} {secs:7.0f}  {status}")
    print(f"ci: {'total':<26} {total:7.0f}  (the phases in sequence, waits included; those beside are not added)")
    tests = []
    try:
        with open(argv[2], encoding="utf-8", errors="replace") as f:
            for line in f:
                m = LINE.match(line)
                if m:
                    tests.append((float(m.group(3)), m.group(1), m.group(2).strip()))
    except OSError as e:
        print(f"ci-times: no ctest log ({e})")
        return 0
    if not tests:
        print("ci: no test times in the ctest log (ctest did not run?)")
        return 0
    tests.sort(reverse=True)
    print(f"ci: the {min(n, len(tests))} slowest of {len(tests)} tests (ctest, -j as run; seconds each, summed {sum(t[0] for t in tests):.0f})")
    for secs, name, status in tests[:n]:
        print(f"ci: {secs:8.1f}  {name}  {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
