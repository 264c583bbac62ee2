#!/usr/bin/env python3
"""The CPU reference beside llama.cpp on the same checkpoint, interleaved, in one run.

A synthetic preset written once, converted by llama.cpp's own converter to an f32 and a bf16 GGUF,
and then, for each repetition and each thread count in turn, our `bench --backend cpu` (once per
forced ISA, and the --before binary) and llama.cpp's `llama-bench` built for this machine and as
the tests build it. Prints each configuration's median tokens/s and the ratios within each
repetition, then the 27B's `golden --plan` (ours, and --before's). A benchmark, not a test: it
fails nothing; a part that cannot run (no torch, a failed build) is reported and left out.

  scripts/bench-cpu-vs-llama.sh [--threads "1 2"] [--reps N] [--prefill N] [--decode N] [--preset NAME]
                                [--model DIR] [--bin BIN] [--before BIN] [--isa "auto baseline avx2 avx512"]
                                [--plan-model DIR|none] [--plan-args "ARGS"]
  (python3 tools/bench_cpu_vs_llama.py takes the same options)

Everything goes under build/bench-cpu-vs-llama/: the checkpoint, the GGUFs, the run's log
(bench-STAMP.log, all that is printed) and each command's own output (runs-STAMP/). llama.cpp is
built by scripts/build-llama-cpp.sh into build/llama.cpp-native (--native: GGML_NATIVE=ON, -O3,
OpenMP) and build/llama.cpp-bench-portable (the tests' flags: GGML_NATIVE=OFF, i.e. AVX2+FMA,
-O1, no OpenMP); the first run builds both (tens of minutes on 2 cores). The converter needs torch
and numpy (scripts/install-deps.sh --hf). Exit 0 after a run, 1 when it cannot run at all (no
degenbisect binary, a preset that synth cannot write), 2 for a bad option or a refused preset
folder. Paths given (--model, --bin, --before, --plan-model) are relative to the folder the
program is run from.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the name in messages: the script's when the script runs this program (it says so), else this file's
PROG = os.environ.pop("DEGEN_SCRIPT_NAME", None) or os.path.basename(sys.argv[0])
WHO = "scripts/bench-cpu-vs-llama.sh"  # the name in the preset folder's marker (scripts/lib/owned-dir.bash)
ISAS = ("auto", "baseline", "avx2", "avx512")
VALUE_OPTIONS = ("--threads", "--reps", "--prefill", "--decode", "--preset", "--model", "--bin", "--before", "--isa",
                 "--plan-model", "--plan-args")
OPTION_HELP = {
    "--threads": "thread counts, each measured for every engine (default: \"1 NPROC\")",
    "--reps": "repetitions of the whole interleaved round; medians over them (default 3)",
    "--prefill": "prompt tokens (ours --prefill, llama-bench -p; default 128)",
    "--decode": "generated tokens (ours --decode, llama-bench -n; default 8)",
    "--preset": "the synthetic checkpoint (default bench-1b, 2 GB bf16), written once to build/bench-cpu-vs-llama/NAME "
                "and reused; a folder there that this program did not write (no .degenbisect-made-by, "
                "scripts/lib/owned-dir.bash, nor NAME.done beside it) is refused (exit 2), untouched",
    "--model": "measure this checkpoint instead of a preset (HF layout, llama.cpp must convert it)",
    "--bin": "our degenbisect binary (default build/degenbisect)",
    "--before": "another degenbisect binary (an older commit's build) in the same loop, at its own ISA choice: "
                "before/after ratios from one run",
    "--isa": "our runs, one per word: auto (the binary's own choice) or a DEGEN_CPU_ISA value forced through the "
             "environment: baseline, avx2, avx512 (default: auto)",
    "--plan-model": "the 27B for `golden --plan` (e.g. `synth --preset qwen36-27b --weights sharded`, which adds the "
                    "storage probe); default: the config-only folder of qwen36-27b (plans need no weights: bf16 "
                    "assumed); none: no plan",
    "--plan-args": "more options of golden --plan, e.g. \"--memory-gb 128\" (plan as if the weights fitted in the "
                   "page cache) or \"--storage-gbps 2\"; without them a 27B that does not fit here is planned as "
                   "computing time plus reads at an unmeasured rate",
}
METAVARS = {"--threads": "LIST", "--isa": "LIST", "--preset": "NAME", "--model": "DIR", "--bin": "BIN",
            "--before": "BIN", "--plan-model": "DIR|none", "--plan-args": "ARGS"}


def bad(message):
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def positive(option, value):
    if not re.fullmatch(r"[1-9][0-9]*", value):
        bad(f"{option} '{value}': expected a positive integer")


def executable_file(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def nproc():
    try:
        return subprocess.run(["nproc"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip() or "1"
    except OSError:
        return "1"


def joined_values(argv):
    """argv with each option's value joined to it (--plan-args "--memory-gb 128" is a value, not an option);
    an option without its value, or an unknown argument, is refused here, in the order given"""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in VALUE_OPTIONS:
            if i + 1 >= len(argv):
                bad(f"{a} needs a value")
            out.append(f"{a}={argv[i + 1]}")
            i += 2
            continue
        if a not in ("-h", "--help"):
            bad(f"unknown argument '{a}' (expected --threads, --reps, --prefill, --decode, --preset, --model, --bin, "
                "--before, --isa, --plan-model, --plan-args or --help)")
        out.append(a)
        i += 1
    return out


def parse_args(argv, cores):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    for option in VALUE_OPTIONS:
        p.add_argument(option, metavar=METAVARS.get(option, "N"), help=OPTION_HELP[option])
    a = p.parse_args(joined_values(argv))
    return validated(a, cores)


def validated(a, cores):
    """the options checked as given (bad: exit 2) and the defaults filled in"""
    if a.threads is not None:
        for t in a.threads.split():
            positive("--threads", t)
        if not a.threads.replace(" ", ""):
            bad("--threads '': expected thread counts such as \"1 2\"")
    else:
        a.threads = "1" if cores == "1" else f"1 {cores}"
    for option in ("reps", "prefill", "decode"):
        if getattr(a, option) is not None:
            positive("--" + option, getattr(a, option))
    a.reps = int(a.reps or 3)
    a.prefill = a.prefill or "128"
    a.decode = a.decode or "8"
    if a.preset is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", a.preset):
        bad(f"--preset '{a.preset}': expected a preset name (degenbisect synth --list)")
    a.preset = a.preset or "bench-1b"
    if a.model is not None:
        if not os.path.isfile(os.path.join(a.model, "config.json")):
            bad(f"--model '{a.model}': no config.json there")
        a.model = os.path.abspath(a.model)
    for option in ("bin", "before"):
        if getattr(a, option) is not None:
            if not executable_file(getattr(a, option)):
                bad(f"--{option} '{getattr(a, option)}': not an executable file")
            setattr(a, option, os.path.abspath(getattr(a, option)))
    a.bin = a.bin or os.path.join(ROOT, "build", "degenbisect")
    if a.isa is not None:
        for i in a.isa.split():
            if i not in ISAS:
                bad(f"--isa '{i}': expected auto, baseline, avx2 or avx512")
        if not a.isa.replace(" ", ""):
            bad("--isa '': expected auto, baseline, avx2 or avx512")
    a.isa = a.isa or "auto"
    if a.plan_model is not None and a.plan_model != "none":
        if not os.path.isfile(os.path.join(a.plan_model, "config.json")):
            bad(f"--plan-model '{a.plan_model}': no config.json there (or none)")
        a.plan_model = os.path.abspath(a.plan_model)
    if a.plan_args is not None and not a.plan_args.startswith("--"):
        bad(f"--plan-args '{a.plan_args}': expected options of golden --plan such as \"--memory-gb 128\"")
    a.plan_args = a.plan_args or ""
    return a


def owned(function, folder):
    """scripts/lib/owned-dir.bash's owned_check or owned_fresh on folder for this program (an earlier
    version's NAME.done beside it counts as its own); False, with the refusal on stderr, when refused"""
    script = 'source "$1"; done_before_marker() { [ -f "$1.done" ]; }; "$2" "$3" "$4" done_before_marker'
    lib = os.path.join(ROOT, "scripts", "lib", "owned-dir.bash")
    return subprocess.run(["bash", "-c", script, "owned", lib, function, folder, WHO]).returncode == 0


def run_to(cmd, out, err=None, env=None):
    """cmd's exit code, its stdout in the file out and its stderr in err (or out)"""
    with open(out, "w") as o:
        e = open(err, "w") if err else None
        try:
            return subprocess.run(cmd, stdout=o, stderr=e or subprocess.STDOUT, env=env).returncode
        except OSError as x:
            print(f"{PROG}: could not run {cmd[0]}: {x}", file=e or o)
            return 127
        finally:
            if e:
                e.close()


def command_text(cmd):
    """what $(cmd 2>/dev/null) gives: stdout, the trailing newlines removed"""
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              errors="replace").stdout.rstrip("\n")
    except OSError:
        return ""


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def first_line_after(path, prefix):
    for line in read_text(path).splitlines():
        if line.startswith(prefix):
            return line
    return ""


def newer_file_in(folder, than):
    """whether a file under folder (links not followed) was modified after the file than"""
    limit = os.stat(than).st_mtime_ns
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p) and os.stat(p).st_mtime_ns > limit:
                return True
    return False


class Bench:
    """one run: the options, where it writes, and what it found to measure"""

    def __init__(self, a, cores):
        self.a = a
        self.cores = cores
        self.w = os.path.join(ROOT, "build", "bench-cpu-vs-llama")
        self.stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log = os.path.join(self.w, f"bench-{self.stamp}.log")
        self.raw = os.path.join(self.w, f"runs-{self.stamp}")
        self.results = os.path.join(self.raw, "results.tsv")  # rep, threads, key, label, prefill, decode, read %, isa
        self.model = a.model
        self.name = ""
        self.llama_native = self.llama_portable = ""
        self.gguf_f32 = self.gguf_bf16 = ""
        self.configs = []

    def say(self, text):
        print(text, flush=True)
        with open(self.log, "a") as f:
            f.write(text + "\n")

    def progress(self, text):
        line = f"bench-cpu-vs-llama: {text}"
        print(line, file=sys.stderr, flush=True)
        with open(self.log, "a") as f:
            f.write(line + "\n")

    def version(self, binary):
        return ";".join(command_text([binary, "--version"]).split("\n")).replace(";", "; ")

    # 1. The run's circumstances: figures on a shared machine mean little without them.
    def describe_machine(self):
        a = self.a
        self.say(f"# bench-cpu-vs-llama {self.stamp}: prefill {a.prefill}, decode {a.decode}, threads {{{a.threads}}}, "
                 f"{a.reps} reps, isa {{{a.isa}}}")
        cpu = next((l for l in read_text("/proc/cpuinfo").splitlines() if "model name" in l), "")
        cpu = cpu.split(":", 1)[1] if ":" in cpu else ""
        cpu = cpu[1:] if cpu.startswith(" ") else cpu
        mem = next((l.split() for l in read_text("/proc/meminfo").splitlines() if "MemTotal" in l), [])
        mem = "%.0f GB" % (float(mem[1]) / 1e6) if len(mem) > 1 else ""
        flags = first_line_after("/proc/cpuinfo", "flags").split(" ")
        wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile")
        self.say(f"# machine: {cpu}, {self.cores} cores, {mem}; ISA flags: {' '.join(f for f in flags if f in wanted)}")
        self.say(f"# load average at start: {self.loadavg()}")
        tree = command_text(["git", "rev-parse", "--short", "HEAD"])
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "src"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL).returncode != 0
        self.say(f"# degenbisect: {a.bin} ({self.version(a.bin)}), tree {tree}{' + uncommitted src changes' if dirty else ''}")
        if a.before:
            self.say(f"# before: {a.before} ({self.version(a.before)})")

    @staticmethod
    def loadavg():
        return " ".join(read_text("/proc/loadavg").split(" ")[:3])

    # 2. The checkpoint: the preset written once (a marker beside it says it was finished).
    def prepare_model(self):
        if self.model:
            self.name = "model-" + os.path.basename(self.model)
            return
        p = self.a.preset
        self.name = p
        self.model = os.path.join(self.w, p)
        done = os.path.join(self.w, p + ".done")
        if os.path.isfile(done) and os.path.isfile(os.path.join(self.model, "config.json")):
            return
        self.progress(f"writing preset {p} to {self.model} (once; reused by later runs)")
        if not owned("owned_fresh", self.model):
            sys.exit(2)
        if os.path.lexists(done):
            os.remove(done)
        synth_log = os.path.join(self.raw, "synth.log")
        if run_to([self.a.bin, "synth", "--preset", p, "--out", self.model], synth_log) != 0:
            last = (read_text(synth_log).rstrip("\n").split("\n") or [""])[-1]
            self.progress(f"synth --preset {p} failed: {last} (all in {synth_log}): nothing to measure")
            sys.exit(1)
        open(done, "a").close()

    # 3. llama.cpp twice, each with llama-bench: for this machine, and with the tests' flags.
    def build_one(self, what, args, folder, log):
        built = run_to(["scripts/build-llama-cpp.sh", *args], log) == 0
        if built:
            lines = [l for l in read_text(log).splitlines() if re.search("already built|built llama", l)]
            self.progress(lines[-1] if lines else "")
            return os.path.join(ROOT, folder, "build", "bin", "llama-bench")
        self.progress(f"llama.cpp {what} build failed (see {log}): its rows are left out")
        return ""

    def build_llama(self):
        self.progress("llama.cpp --native in build/llama.cpp-native (the first build takes tens of minutes on 2 cores)")
        self.llama_native = self.build_one("--native", ["--native"], "build/llama.cpp-native",
                                           os.path.join(self.w, "build-native.log"))
        self.progress("llama.cpp as the tests build it in build/llama.cpp-bench-portable")
        self.llama_portable = self.build_one("portable", ["--dir", "build/llama.cpp-bench-portable", "--targets",
                                                          "llama-bench"], "build/llama.cpp-bench-portable",
                                             os.path.join(self.w, "build-portable.log"))
        if self.llama_native:
            self.say("# llama.cpp native: " + read_text("build/llama.cpp-native/ENGINE").rstrip("\n"))
        if self.llama_portable:
            self.say("# llama.cpp portable: " + read_text("build/llama.cpp-bench-portable/ENGINE").rstrip("\n"))

    # 4. The GGUFs, by llama.cpp's own converter (tools/convert_gguf.py), redone when the checkpoint is
    # newer; written under a temporary name so that an interrupted conversion is never reused.
    def convert(self, outtype):
        out = os.path.join(self.w, f"{self.name}.{outtype}.gguf")
        if os.path.isfile(out) and not newer_file_in(self.model, out):
            return out
        src = os.path.join(ROOT, "build", "llama.cpp-native", "src")
        if not os.path.isfile(os.path.join(src, "convert_hf_to_gguf.py")):
            src = os.path.join(ROOT, "build", "llama.cpp", "src")
        self.progress(f"converting {self.model} to {out} ({outtype}, llama.cpp's converter from {src})")
        for f in (out, out + ".tmp"):
            if os.path.lexists(f):
                os.remove(f)
        log = os.path.join(self.w, f"convert-{outtype}.log")
        if run_to(["python3", "tools/convert_gguf.py", self.model, out + ".tmp", "--outtype", outtype, "--llama", src],
                  log) == 0:
            os.replace(out + ".tmp", out)
            return out
        if os.path.lexists(out + ".tmp"):
            os.remove(out + ".tmp")
        self.progress(f"conversion to {outtype} failed (see {log}; it needs torch and numpy: scripts/install-deps.sh --hf)")
        return ""

    def convert_ggufs(self):
        if not self.llama_native and not self.llama_portable:
            return
        if subprocess.run(["python3", "-c", "import torch, numpy"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            self.progress("no torch/numpy for llama.cpp's converter (scripts/install-deps.sh --hf): "
                          "the llama.cpp rows are left out")
            return
        self.gguf_f32 = self.convert("f32")
        if self.llama_native:
            self.gguf_bf16 = self.convert("bf16")

    # 5. One measurement: a configuration's command, its output kept, its figures appended to results.
    def append(self, *fields):
        with open(self.results, "a") as f:
            f.write("\t".join(fields) + "\n")

    def measure_ours(self, rep, t, key, label, binary, isa):
        out = os.path.join(self.raw, f"{rep}-t{t}-{key}.txt")
        env = dict(os.environ, OMP_NUM_THREADS=t)
        if isa != "auto":
            env["DEGEN_CPU_ISA"] = isa
        rc = run_to([binary, "bench", "--backend", "cpu", "--model", self.model, "--prefill", self.a.prefill,
                     "--decode", self.a.decode], out, env=env)
        if rc != 0:
            self.progress(f"{label} at {t} threads exited {rc} (see {out})")
        f = ours_figures(read_text(out))
        if f["threads"] and f["threads"] != t:
            self.progress(f"{label}: asked for {t} threads, its bench says {f['threads']}")
        self.append(str(rep), t, key, label, f["prefill"] or "NA", f["decode"] or "NA", f["read"] or "NA", f["isa"])

    def measure_llama(self, rep, t, key, label, llama_bench, gguf):
        out = os.path.join(self.raw, f"{rep}-t{t}-{key}.jsonl")
        rc = run_to([llama_bench, "-m", gguf, "-p", self.a.prefill, "-n", self.a.decode, "-t", t, "-r", "1", "-o",
                     "jsonl"], out, err=out + ".stderr")
        if rc != 0:
            self.progress(f"{label} at {t} threads exited {rc} (see {out}.stderr)")
        try:
            pre, dec = llama_figures(read_text(out))
        except ValueError as e:
            self.progress(f"{label} at {t} threads: expected JSON lines from llama-bench in {out}, found {e}")
            pre, dec = "NA", "NA"
        self.append(str(rep), t, key, label, pre, dec, "NA", "")

    def list_configs(self):
        """the configurations of one round: (key, label, kind, binary, isa or GGUF)"""
        a, c = self.a, self.configs
        for i in a.isa.split():
            if i == "auto":
                c.append(("ours", "degenbisect", "ours", a.bin, "auto"))
            else:
                c.append((f"ours-{i}", f"degenbisect DEGEN_CPU_ISA={i}", "ours", a.bin, i))
        if a.before:
            c.append(("before", "degenbisect --before", "ours", a.before, "auto"))
        if self.gguf_f32:
            if self.llama_native:
                c.append(("llama-native-f32", "llama.cpp native, f32 GGUF", "llama", self.llama_native, self.gguf_f32))
            if self.llama_portable:
                c.append(("llama-portable-f32", "llama.cpp as the tests build it, f32 GGUF", "llama",
                          self.llama_portable, self.gguf_f32))
        if self.gguf_bf16 and self.llama_native:
            c.append(("llama-native-bf16", "llama.cpp native, bf16 GGUF", "llama", self.llama_native, self.gguf_bf16))

    def measure_all(self):
        """interleaved: every configuration once per round and thread count, the starting configuration
        rotated each round, so that a slow spell of the shared machine falls on all of them alike"""
        n = len(self.configs)
        for rep in range(1, self.a.reps + 1):
            for t in self.a.threads.split():
                for j in range(n):
                    key, label, kind, binary, arg = self.configs[(j + rep - 1) % n]
                    self.progress(f"round {rep}/{self.a.reps}, threads {t}: {label}")
                    measure = self.measure_ours if kind == "ours" else self.measure_llama
                    measure(rep, t, key, label, binary, arg)

    # 6. Per thread count: each configuration's medians, then ours against each other engine.
    def summarise(self):
        rows = [l.rstrip("\n").split("\t") for l in read_text(self.results).splitlines(True) if l.strip()]
        for line in summary_lines(rows):
            self.say(line)

    # 7. The 27B's golden plan: a config-only folder is enough (the plan assumes bf16 weights and probes
    # the reference's own matmul on the model's shapes); a real checkpoint adds the storage probe.
    def plan_27b(self):
        a = self.a
        if a.plan_model == "none":
            return
        folder = a.plan_model
        if not folder:
            folder = os.path.join(self.w, "qwen36-27b-config")
            if not os.path.isfile(os.path.join(folder, "config.json")):
                shutil.rmtree(folder, ignore_errors=True)
                log = os.path.join(self.raw, "synth-27b.log")
                if run_to([a.bin, "synth", "--preset", "qwen36-27b", "--out", folder], log) != 0:
                    self.progress(f"synth --preset qwen36-27b (config only) failed (see {log}): no plan")
                    return
        extra = a.plan_args.split()
        self.say("")
        self.say(f"27B golden --plan --model {folder} --cases cases/smoke.json{' ' + ' '.join(extra) if extra else ''} "
                 f"({os.environ.get('OMP_NUM_THREADS') or self.cores} threads)")
        for tag, binary in [("ours", a.bin)] + ([("before", a.before)] if a.before else []):
            self.progress(f"golden --plan ({tag})")
            out = os.path.join(self.raw, f"plan-{tag}.txt")
            rc = run_to([binary, "golden", "--plan", "--model", folder, "--cases", "cases/smoke.json", *extra], out)
            if rc != 0:
                self.progress(f"golden --plan ({tag}) exited {rc} (see {out})")
            self.say(f"  {tag} ({binary}):")
            for line in plan_lines(read_text(out)):
                self.say(line)


def ours_figures(text):
    """from our bench's output: the first "N tok/s" on the lines led by prefill and decode, decode's
    streaming-read percentage, the isa line and the thread count the backend line reports ("" when absent)"""
    f = {"prefill": "", "decode": "", "read": "", "isa": None, "threads": []}
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        rate = re.search(r"[0-9.]+ tok/s", line)
        if words[0] in ("prefill", "decode") and rate and not f[words[0]]:
            f[words[0]] = rate.group()[:-6]
        read = re.search(r"[0-9.]+% of the streaming-read rate", line)
        if words[0] == "decode" and read and not f["read"]:
            f["read"] = read.group().split("%")[0]
        if words[0] == "isa" and f["isa"] is None:
            f["isa"] = " ".join(words[1:])
        if words[0] == "backend":
            f["threads"] += [words[i - 1] for i in range(1, len(words)) if words[i].startswith("threads")]
    f["isa"] = f["isa"] or ""
    f["threads"] = "\n".join(f["threads"])
    return f


def llama_figures(text):
    """llama-bench -o jsonl: avg_ts of its prompt test and of its generation test ("NA" when absent);
    ValueError when a line that starts with { is no JSON"""
    pre = dec = "NA"
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            pre = "%.3f" % r["avg_ts"]
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            dec = "%.3f" % r["avg_ts"]
    return pre, dec


def plan_lines(text):
    """golden --plan's lines worth keeping, indented by four"""
    keep = re.compile(r"^ *(golden plan|model|storage read|decode matmul|prefill matmul|page cache|estimate|REFUSED):")
    return ["    " + line.lstrip(" ") for line in text.splitlines() if keep.search(line)]


# The summary: per thread count, each configuration's medians, then ours against each other engine as
# the median over the rounds of the ratio within the round (the two ran minutes apart, not hours).
SHORT = {"ours": "ours", "before": "before", "llama-native-f32": "llama native f32",
         "llama-portable-f32": "llama tests' f32", "llama-native-bf16": "llama native bf16"}


def number(s):
    return float(s) if s not in ("", "NA") else None


def fmt(v, f):
    return ("%" + f) % v if v is not None else "-"


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def short_name(key):
    return SHORT.get(key, key.replace("ours-", "ours "))


class Results:
    """results.tsv's rows: (threads, key) -> {rep: (prefill, decode, read %)}, with each key's label
    and first isa line, the keys ours first (then before), each group in the order measured"""

    def __init__(self, rows):
        self.by, self.labels, self.isa, order = {}, {}, {}, []
        for rep, t, key, label, pre, dec, rd, isa_line in (r + [""] * (8 - len(r)) for r in rows):
            self.by.setdefault((int(t), key), {})[rep] = (number(pre), number(dec), number(rd))
            self.labels[key] = label
            if isa_line and key not in self.isa:
                self.isa[key] = isa_line
            if key not in order:
                order.append(key)
        first = list(order)
        self.order = sorted(order, key=lambda k: (not k.startswith("ours"), k != "before", first.index(k)))
        self.ours = [k for k in self.order if k.startswith("ours") or k == "before"]
        self.others = [k for k in self.order if k not in self.ours] + (["before"] if "before" in self.ours else [])

    def ratio(self, t, a, b, i):
        """median and range over the rounds of a's figure i / b's in the same round"""
        ra, rb = self.by.get((t, a), {}), self.by.get((t, b), {})
        rs = [ra[r][i] / rb[r][i] for r in ra if r in rb and ra[r][i] and rb[r][i]]
        if not rs:
            return "-"
        return "%.2fx [%.2f-%.2f]" % (statistics.median(rs), min(rs), max(rs)) if len(rs) > 1 else "%.2fx" % rs[0]

    def threads_lines(self, t):
        by = self.by
        n = max(len(v) for (tt, _), v in by.items() if tt == t)
        out = ["", "threads %d: median tok/s over %d round%s" % (t, n, "" if n == 1 else "s"),
               "  %-44s %10s %10s %12s" % ("", "prefill", "decode", "decode/read")]
        for k in self.order:
            if (t, k) not in by:
                continue
            v = by[(t, k)].values()
            rd = med([x[2] for x in v])
            out.append("  %-44s %10s %10s %12s" % (self.labels[k], fmt(med([x[0] for x in v]), ".1f"),
                                                   fmt(med([x[1] for x in v]), ".2f"),
                                                   fmt(rd, ".0f") + "%" if rd is not None else "-"))
        cols = [b for b in self.others if (t, b) in by]
        for i, what in ((0, "prefill"), (1, "decode")):
            out.append("  %s ratio, ours / the column: the median over the rounds of the ratio within a round [range]"
                       % what)
            out.append("  %-15s" % "" + "".join("%19s" % short_name(b) for b in cols))
            for a in self.ours:
                if (t, a) in by:
                    out.append("  %-15s" % short_name(a)
                               + "".join("%19s" % ("" if a == b else self.ratio(t, a, b, i)) for b in cols))
        return out


def summary_lines(rows):
    """the summary printed after the rounds, from results.tsv's rows (lists of fields)"""
    r = Results(rows)
    out = []
    for t in sorted({t for t, _ in r.by}):
        out += r.threads_lines(t)
    if r.isa:
        out.append("")
        out += ["isa line of %s: %s" % (r.labels[k], r.isa[k]) for k in r.ours if k in r.isa]
    return out + ["", "decode/read: our best decode step's weight bytes per second as a fraction of the "
                      "streaming-read probe (our bench)",
                  "llama-bench: prefill = its pp test, decode = its tg test at context 0; ours decodes after the prefill"]


def main(argv):
    cores = nproc()
    a = parse_args(argv, cores)
    os.chdir(ROOT)
    # The preset's folder is rewritten when unfinished: only when this program wrote it (its marker, or
    # the NAME.done of an earlier version of the script beside it).
    w = os.path.join(ROOT, "build", "bench-cpu-vs-llama")
    if not a.model and not owned("owned_check", os.path.join(w, a.preset)):
        return 2
    if not executable_file(a.bin):
        print(f"{PROG}: no {a.bin} (make build, or give --bin)", file=sys.stderr, flush=True)
        return 1
    b = Bench(a, cores)
    os.makedirs(b.raw, exist_ok=True)
    open(b.log, "w").close()
    b.describe_machine()
    b.prepare_model()
    b.build_llama()
    b.convert_ggufs()
    b.list_configs()
    b.measure_all()
    b.summarise()
    b.plan_27b()
    b.say(f"# load average at end: {b.loadavg()}; log {b.log}, each command's output in {b.raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
