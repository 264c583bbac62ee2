#!/usr/bin/env python3
"""Test driver (tests/cli/vllm_real.sh): tools/vllm_dump.py's dumps from ONE vLLM engine, twice: into
OUT/clean, then, after creating FLAG (the switch of tests/vllm/sitecustomize.py's planted bug, read at
every call), into OUT/bug. One engine start (about 25 s of the 35 s a dump takes) instead of two.

  VENV/bin/python tests/vllm/dump_twice.py FLAG OUT [tools/vllm_dump.py's arguments, without --out]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import vllm_dump  # noqa: E402


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    flag, out = sys.argv[1], sys.argv[2]
    a = vllm_dump.parse_args(sys.argv[3:] + ["--out", out])
    try:
        s = vllm_dump.Session(a)
        if os.path.exists(flag):
            raise vllm_dump.UserError(f"{flag} exists before the clean dump")
        s.dump(os.path.join(out, "clean"))
        open(flag, "w").close()
        try:
            s.dump(os.path.join(out, "bug"))
        finally:
            os.remove(flag)
    except vllm_dump.UserError as e:
        print(f"dump_twice: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
