#!/usr/bin/env python3
"""The trained model under every fault of the catalogue: one Markdown row per fault, for docs/faults.md.
A benchmark-style program, not a test: it prints figures and never fails on them.

For each fault of `degenbisect faults --json` it runs
  - eval's fault table (`eval --faults --fault NAME`) on models/tiny-trained with a record of
    golden/tiny-trained (default: smoke, its chat case two-plus-two, "What is 2+2?", 48 tokens):
    compare's verdict and first layer, the free-running generation (degenerate or not, and the
    start of the tested text) and the held-out accuracy under the fault. The fault table adds what
    a fault needs (tp=2, mtp=2, the serving toggles); this program also passes the serving toggles of
    the catalogue's `needs` (prefill_chunk=8, prefix_cache=on, batch=4) as eval's base
    configuration, so that the accuracy without the fault is measured under the same toggles;
  - selftest on the smoke record (one case, one layer of each kind), unless --no-selftest.
An untestable configuration (exit 125, or a fault-table row marked untestable) prints
"untestable: reason"; a fault the model cannot host prints "n/a: reason".

The table goes to stdout, progress to stderr. Exit 0 after a run (whatever the figures), 128 for a
bad option, a missing record or binary, or a catalogue that cannot be read.
Cost: about 5-20 s per fault on 2 cores with the defaults, 28 faults in about 5 minutes (docs/faults.md).
Run as scripts/fault-figures.sh or python3 tools/fault_figures.py, with the same options.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the name in messages: the script's when the script runs this program (it says so), else this file's
PROG = os.environ.pop("DEGEN_SCRIPT_NAME", None) or os.path.basename(sys.argv[0])
BAD_INPUT = 128
TABLE_HEAD = ("| fault | added config | free-running (all layers of its kind) | tested text | "
              "accuracy under the fault (without it) | compare: all layers / one layer | selftest |")


def die(message):
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    sys.exit(BAD_INPUT)


class Parser(argparse.ArgumentParser):
    def error(self, message):
        die(f"{message} (--help)")


def parse_args(argv):
    p = Parser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
               allow_abbrev=False)
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "degenbisect"),
                   help="the binary (default build/degenbisect)")
    p.add_argument("--fault", action="append", default=[], metavar="NAME",
                   help="only this fault (repeatable; default: the whole catalogue)")
    p.add_argument("--suite", default="smoke", metavar="S",
                   help="record of golden/tiny-trained for compare and the free-running runs (default smoke; "
                        "long-decode: 520-token cases, about 5 s per case and fault more)")
    p.add_argument("--case", action="append", default=[], metavar="ID",
                   help="case of that record (repeatable; default with smoke: two-plus-two, else story-fox)")
    p.add_argument("--questions", default="10", metavar="N", help="held-out questions per fault (default 10)")
    p.add_argument("--max-new-tokens", default="128", metavar="N",
                   help="token budget per question (default 128; eval's own default is 256)")
    p.add_argument("--no-selftest", action="store_true", help="no selftest column")
    p.add_argument("--json", metavar="FILE", help="also write every fault-table and selftest row as JSON")
    args, unknown = p.parse_known_args(argv)
    if unknown:
        die(f"unknown argument '{unknown[0]}' (--help)")
    return args


def clean(s, root, n=140):
    """s on one line, the repository's path removed, at most n characters, no table bars"""
    return " ".join(str(s).replace(root, "").split())[:n].replace("|", "/")


def strip_mtp_tp(config):
    """config without mtp= and tp= (the fault table adds those, and eval's --config takes no mtp)"""
    return ",".join(kv for kv in config.split(",") if kv and not kv.startswith(("mtp=", "tp=")))


def needs_of(catalogue, name):
    """the catalogue's needs for the fault minus mtp= and tp=; "" when none"""
    for f in catalogue:
        if f["name"] == name:
            return strip_mtp_tp(f.get("needs") or "")
    return ""


def untestable_hint(table_path):
    """the serving toggles an untestable row's reason names ("(for example prefill_chunk=8)"), or "" """
    for r in load_json(table_path).get("faults", []):
        m = re.search(r"\(for example ([^)]*)\)", r.get("reason") or "")
        if r.get("verdict") == "untestable" and m:
            return m.group(1)
    return ""


def load_json(path):
    with open(path) as f:
        return json.load(f)


def read_text(path):
    with open(path, errors="replace") as f:
        return f.read()


def selftest_cell(path, rc, out, root):
    """the selftest column: each status with its layers (and the op found, the first note)"""
    if not os.path.exists(path):
        tail = read_text(out).strip().splitlines()[-1:] or ["?"]
        return ("untestable: " if rc == 125 else f"exit {rc}: ") + tail[0].replace(root, "")[:120].replace("|", "/")
    doc = load_json(path)
    rows = doc if isinstance(doc, list) else doc.get("rows", [])
    if not rows:
        return f"no rows (exit {rc})"
    by = {}
    for r in rows:
        by.setdefault(r.get("status", "?"), []).append(r)
    parts = []
    for s in ("pass", "fail", "skip"):
        if s in by:
            rs = by[s]
            where = ", ".join((("L%d" % r["layer"]) if r.get("layer", -1) >= 0 else "model")
                              + (": " + r["found_op"] if s == "pass" and r.get("found_op") else "") for r in rs)
            note = ""
            if s != "pass" and rs[0].get("note"):
                note = ": " + rs[0]["note"].replace(root, "")[:100]
            parts.append(f"{s} ({where}){note}")
    return "; ".join(parts).replace("|", "/")


def verdict(r, root):
    if not r.get("applicable", True):
        return "n/a: " + clean(r.get("reason", ""), root, 90)
    if r.get("verdict") == "untestable":
        return "untestable: " + clean(r.get("reason", ""), root, 200)
    v = r.get("verdict", "?")
    if r.get("first_layer") is not None:
        v += f" (layer {r['first_layer']})"
    return v


def free_running(first):
    cases = first.get("cases", 0)
    extra = []
    if first.get("looping"):
        extra.append(f"{first['looping']} loop")
    if first.get("empty"):
        extra.append(f"{first['empty']} empty")
    if first.get("rules"):
        extra.append(first["rules"])
    extra.append(f"seq_rep_4 {first.get('mean_seq_rep_4', 0):.3f}")
    if first.get("golden_degenerate"):
        extra.append(f"golden {first['golden_degenerate']}/{cases}")
    return f"{first.get('degenerate', 0)}/{cases} degenerate (" + ", ".join(extra) + ")"


def table_row(path, rc, out, name, base, st, root):
    """the fault's Markdown row from eval's fault-table JSON (or, without it, eval's output)"""
    cfg = f"`{base}`" if base else "-"
    if not os.path.exists(path):
        lines = [line for line in read_text(out).splitlines() if line.strip()]
        why = next((line for line in reversed(lines) if "untestable" in line or "error" in line.lower()),
                   lines[-1] if lines else "?")
        kind = "untestable" if rc == 125 else f"error (exit {rc})"
        return f"| {name} | {cfg} | {kind}: {clean(why, root)} | | | | {st} |"
    doc = load_json(path)
    rows = doc.get("faults", [])
    ref = doc.get("tested", {}).get("accuracy", {})
    ref_s = f"{ref.get('correct', '?')}/{ref.get('n', '?')}" if ref else "?"
    if not rows:
        return f"| {name} | {cfg} | no fault-table row (exit {rc}) | | | | {st} |"
    first = rows[0]
    if not first.get("applicable", True) or first.get("verdict") == "untestable":
        return f"| {name} | {cfg} | {verdict(first, root)} | | | | {st} |"
    q = first.get("questions", 0)
    acc = (f"{first.get('correct', 0)}/{q}" + (f" = {100 * first.get('correct', 0) / q:.0f} %" if q else "")
           + f" ({ref_s})")
    comp = " / ".join(f"{verdict(r, root)}" + ("" if i == 0 else f" [{r.get('scope', '')}]")
                      for i, r in enumerate(rows[:2]))
    ex = clean(first.get("example") or "", root, 70).replace("`", "'")
    ex = f"`{ex}`" if ex else ""
    return f"| {name} | {cfg} | {free_running(first)} | {ex} | {acc} | {comp} | {st} |"


def run(cmd, out_path):
    """cmd with stdout and stderr to out_path, at most 900 s (124 then, as timeout(1) says)"""
    with open(out_path, "w") as out:
        try:
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=900).returncode
        except subprocess.TimeoutExpired:
            return 124
        except OSError as e:
            print(f"{PROG}: could not run {cmd[0]}: {e}", file=out)
            return 126


class Figures:
    """one run over the faults: the settings, the work folder, and the rows printed"""

    def __init__(self, args, work):
        self.a = args
        self.work = work
        self.record = os.path.join(ROOT, "golden", "tiny-trained", args.suite)
        self.smoke = os.path.join(ROOT, "golden", "tiny-trained", "smoke")
        self.model = os.path.join(ROOT, "models", "tiny-trained")
        self.root = ROOT + "/"
        self.rows = []

    def path(self, name, suffix):
        return os.path.join(self.work, name + suffix)

    def run_table(self, name, base):
        cmd = [self.a.bin, "-q", "eval", "--model", self.model, "--golden", self.record, "--faults", "--fault", name]
        for c in self.a.case:
            cmd += ["--case", c]
        if base:
            cmd += ["--config", base]
        cmd += ["--limit", self.a.questions, "--fault-questions", self.a.questions, "--max-new-tokens",
                self.a.max_new_tokens, "--mtp-max", "0", "--no-reference", "--json", self.path(name, ".json")]
        return run(cmd, self.path(name, ".out"))

    def selftest(self, name):
        if self.a.no_selftest:
            return "-"
        rc = run([self.a.bin, "-q", "selftest", "--model", self.model, "--golden", self.smoke, "--case", "two-plus-two",
                  "--fault", name, "--layers-per-kind", "1", "--json", self.path(name, ".selftest.json")],
                 self.path(name, ".selftest.out"))
        return selftest_cell(self.path(name, ".selftest.json"), rc, self.path(name, ".selftest.out"), self.root)

    def fault(self, name, catalogue):
        base = needs_of(catalogue, name)
        rc = self.run_table(name, base)
        # A catalogue without a `needs` field: take the serving toggles from the untestable reason
        # ("... it needs prefill_chunk (for example prefill_chunk=8)") and run once more.
        if not base and os.path.exists(self.path(name, ".json")):
            hint = strip_mtp_tp(untestable_hint(self.path(name, ".json")))
            if hint:
                base = hint
                rc = self.run_table(name, base)
        st = self.selftest(name)
        print(table_row(self.path(name, ".json"), rc, self.path(name, ".out"), name, base, st, self.root), flush=True)
        if self.a.json:
            row = {"fault": name}
            for key, suffix in (("table", ".json"), ("selftest", ".selftest.json")):
                p = self.path(name, suffix)
                row[key] = load_json(p) if os.path.exists(p) else None
            self.rows.append(row)


def catalogue_of(binary, work):
    """the catalogue as JSON (every fault's name; `needs` when the catalogue has that field)"""
    path = os.path.join(work, "faults.json")
    with open(path, "w") as out, open(os.path.join(work, "faults.err"), "w+") as err:
        try:
            rc = subprocess.run([binary, "faults", "--json"], stdout=out, stderr=err).returncode
        except OSError as e:
            rc, text = 1, str(e)
        else:
            err.seek(0)
            text = err.read(300).rstrip("\n")
    if rc != 0:
        die(f"`degenbisect faults --json` failed: {text}")
    try:
        catalogue = load_json(path)
        if not isinstance(catalogue, list) or not all(isinstance(f, dict) and "name" in f for f in catalogue):
            raise ValueError("not a list of objects with a name")
    except ValueError as e:
        die(f"`degenbisect faults --json`: expected a JSON list of faults, each with a name; found {e}")
    return catalogue


def git_line():
    def git(*a):
        return subprocess.run(["git", *a], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rev = git("rev-parse", "--short", "HEAD")
    dirty = git("diff", "--quiet", "HEAD", "--", "src").returncode != 0
    return (rev.stdout.strip() if rev.returncode == 0 else "?") + (" (+ uncommitted changes in src/)" if dirty else "")


def main(argv):
    a = parse_args(argv)
    record = os.path.join(ROOT, "golden", "tiny-trained", a.suite)
    if not os.path.isfile(os.path.join(record, "manifest.json")):
        die(f"no record at {record}")
    if not a.case:
        a.case = ["two-plus-two"] if a.suite == "smoke" else ["story-fox"]
    if not (os.path.isfile(a.bin) and os.access(a.bin, os.X_OK)):
        die(f"no binary at {a.bin} (build it first: make build)")
    with tempfile.TemporaryDirectory() as work:
        catalogue = catalogue_of(a.bin, work)
        faults = a.fault or [f["name"] for f in catalogue]
        print(f"fault-figures: {git_line()}, {a.bin}, record {a.suite} (cases {' '.join(a.case)}), "
              f"{a.questions} held-out questions per fault, {a.max_new_tokens} tokens each", file=sys.stderr, flush=True)
        print()
        print(TABLE_HEAD)
        print("|---|---|---|---|---|---|---|", flush=True)
        figures = Figures(a, work)
        t0 = time.monotonic()
        for name in faults:
            t = time.monotonic()
            figures.fault(name, catalogue)
            print(f"fault-figures: {name} done ({int(time.monotonic() - t)} s)", file=sys.stderr, flush=True)
        print()
        print(f"({int(time.monotonic() - t0)} s in all; accuracy in brackets: the base configuration without the fault "
              "on the same questions)", flush=True)
        if a.json:
            with open(a.json, "w") as f:
                f.write(json.dumps(figures.rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
