#!/usr/bin/env python3
"""A stand-in degenbisect for tests/cli/fault_figures.sh: answers `faults --json`, `eval --faults` and
`selftest` from tests/fixtures/fault-figures/runs.json (what the real commands wrote, and made-up
refusals), so that tools/fault_figures.py is tested on the binary's own JSON in a second.
STUB_FIXTURE names the fixture, STUB_ROOT replaces @ROOT@ in what it prints and writes (paths the tool strips), STUB_FAIL_FAULTS
makes `faults --json` fail."""
import json
import os
import sys


def option(args, name, default=""):
    return args[args.index(name) + 1] if name in args else default


def main(args):
    fixture = json.load(open(os.environ["STUB_FIXTURE"]))
    if args[:2] == ["faults", "--json"]:
        if os.environ.get("STUB_FAIL_FAULTS"):
            print("stand-in: no catalogue", file=sys.stderr)
            return 1
        print(json.dumps(fixture["catalogue"]))
        return 0
    command = next(a for a in args if not a.startswith("-"))
    run = fixture["runs"][option(args, "--fault")]
    if command == "eval":
        run = run["eval"].get(option(args, "--config"))
        if run is None:
            print("stand-in: no run for --config " + option(args, "--config"))
            return 3
    else:
        run = run["selftest"]
    root = os.environ.get("STUB_ROOT", "")
    sys.stdout.write(run["out"].replace("@ROOT@", root))
    if run["json"] is not None:
        with open(option(args, "--json"), "w") as f:
            f.write(json.dumps(run["json"]).replace("@ROOT@", root))
    return run["exit"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
