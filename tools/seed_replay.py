#!/usr/bin/env python3
"""What scripts/seed-replay.sh reads from degenbisect's JSON outputs (the seed's incident replayed).

  python3 tools/seed_replay.py cells SWEEP_RESULTS_JSONL CELLS_JSON
      The cells the replay's next steps use, from the sweep's own results (sweep/results.jsonl): the
      first good cell; the bad cell that differs from it in the most axes; the user's cell nearest the
      good one (the good cell's values on every axis but the last, tp: bad too). Writes them to
      CELLS_JSON ({"good", "bad", "bad_near"}) and prints them, one a line, in that order.
  python3 tools/seed_replay.py summary OUT
      What the replay comes to, from OUT's report.json, bisect.json and localise.json: the sweep's main
      effects, the toggles bisect blames, the layer and operation it localises, each compared case's
      text and verdict, and, when no tested text degenerates, where compare sees the fault instead.

Exit 0, or 1 with what was expected and what was found (a sweep without both a good and a bad cell,
a missing or unreadable output).
"""

import argparse
import json
import os
import sys

PROG = "seed-replay"


class Unexpected(Exception):
    """an output that is not what the replay expects: the message says what was expected and found"""


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise Unexpected(f"expected {path}, a step's JSON output; found none ({e.strerror})")
    except ValueError as e:
        raise Unexpected(f"expected JSON in {path}; found {e}")


def sweep_rows(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        raise Unexpected(f"expected the sweep's results at {path}; found none ({e.strerror})")
    except ValueError as e:
        raise Unexpected(f"expected one JSON object a line in {path}; found {e}")


def choose_cells(rows):
    """{"good", "bad", "bad_near"}: the first good cell, the bad cell that differs from it most, and the
    first bad cell equal to it on every axis but the last"""
    good = [r for r in rows if r["verdict"] == "good"]
    bad = [r for r in rows if r["verdict"] == "bad"]
    if not good or not bad:
        raise Unexpected(f"the sweep has {len(good)} good and {len(bad)} bad cells; it needs both")
    g = good[0]
    far = max(bad, key=lambda r: sum(a != b for a, b in zip(r["values"], g["values"])))
    near = [r for r in bad if r["values"][:-1] == g["values"][:-1]]
    if not near:
        raise Unexpected("no bad cell shares the good cell's attention, ssm_dtype and MTP")
    return {"good": g["cell"], "bad": far["cell"], "bad_near": near[0]["cell"]}


def cells(results, out):
    chosen = choose_cells(sweep_rows(results))
    with open(out, "w") as f:
        json.dump(chosen, f, indent=1)
    for key in ("good", "bad", "bad_near"):
        print(chosen[key])


def effect_lines(sweep):
    effects = {}
    for e in sweep["main_effects"]:
        effects.setdefault(e["axis"], []).append(e)
    lines = ["main effects (share of bad cells with each value):"]
    for axis, es in effects.items():
        shares = [f'{e["value"]} {e["bad_with"]}/{e["with"]}' for e in es]
        same = len({e["bad_with"] * 1.0 / e["with"] for e in es}) == 1
        lines.append(f'  {axis:10} {"no effect" if same else "EFFECT   "}  ' + ", ".join(shares))
    return lines


def case_line(k):
    t = k["generation"]["text"] or {}
    same = t.get("golden") == t.get("tested")
    return (f'text {k["id"]:14} {"the same as the golden" if same else "differs from byte %d" % t.get("common_prefix_bytes", 0)}'
            f'; degenerate: {k["generation"]["degenerate"]}; KLD prefill {k["kld_mean_prefill"]:.2e}; verdict {k["verdict"]}')


def plain_line(c):
    """what a user would see, said plainly: on this model the text may show nothing where compare does"""
    same = any((k["generation"]["text"] or {}).get("golden") == (k["generation"]["text"] or {}).get("tested")
               for k in c["cases"])
    fb = c["first_break"] or {}
    layer = next((l for l in c["layers"] if l["layer"] == fb.get("layer")), None)
    kld = [k["kld_mean_prefill"] for k in c["cases"]]
    return ("no tested text degenerates" + (": the seed's prompt is answered as the golden answers it" if same else "")
            + f"; compare catches the fault in the logits (mean KLD {min(kld):.2e} to {max(kld):.2e}, every case over its limit)"
            + (f' and in the per-layer error (layer {layer["layer"]}: rel_l2 {layer["iso_prefill"]:.3g} with the golden input'
               f' injected, limit {layer["limit_prefill"]:.3g})' if layer else ""))


def summary_lines(out):
    rep = load_json(os.path.join(out, "report.json"))
    lines = effect_lines(rep["sweeps"][0])
    b = load_json(os.path.join(out, "bisect.json"))
    lines.append("bisect good -> bad: culprit toggles " + ", ".join(b["culprit_toggles"]))
    loc = load_json(os.path.join(out, "localise.json")).get("localisation", {})
    lines.append(f'bisect within tp=2: layer {loc.get("layer")}, operation {loc.get("op")}-{loc.get("layer")}, '
                 f'confirmed by patching: {bool((loc.get("patch") or {}).get("confirmed"))}')
    c = rep["compares"][0]
    lines += [case_line(k) for k in c["cases"]]
    if not any(k["generation"]["degenerate"] for k in c["cases"]):
        lines.append(plain_line(c))
    return lines


def main(argv):
    p = argparse.ArgumentParser(prog="tools/seed_replay.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    sub = p.add_subparsers(dest="command", required=True, metavar="{cells,summary}")
    c = sub.add_parser("cells", help="the good, the far bad and the near bad cell of the sweep")
    c.add_argument("results", metavar="SWEEP_RESULTS_JSONL")
    c.add_argument("out", metavar="CELLS_JSON")
    s = sub.add_parser("summary", help="what the replay comes to, from its outputs")
    s.add_argument("out", metavar="OUT")
    a = p.parse_args(argv)
    try:
        if a.command == "cells":
            cells(a.results, a.out)
        else:
            print("\n".join(summary_lines(a.out)))
    except Unexpected as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except (KeyError, IndexError, TypeError) as e:
        print(f"{PROG}: expected degenbisect's JSON outputs in the form this replay reads; found them without "
              f"what it reads ({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
