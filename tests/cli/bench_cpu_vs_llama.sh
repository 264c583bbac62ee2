# scripts/bench-cpu-vs-llama.sh (tools/bench_cpu_vs_llama.py) without llama.cpp or a benchmark run:
# what it reads from each command, on committed outputs (tests/fixtures/bench-cpu-vs-llama/): our
# bench's text (bench.txt, a real `bench --backend cpu` on models/tiny-trained), llama-bench's -o
# jsonl (llama-bench.jsonl, made up in its shape), golden --plan's lines, and the summary of a run's
# results.tsv, which must be the committed summary*.txt (what the shell script printed before it
# became a Python program). Then the options it refuses (exit 2, nothing run). A second or two.
source "$(dirname "$0")/lib.bash"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
F="$SRC/tests/fixtures/bench-cpu-vs-llama"
python3 - "$SRC/tools" "$F" <<'PY' || fail "what bench-cpu-vs-llama reads"
import os, sys
sys.dont_write_bytecode = True  # nothing written into the source tree
sys.path.insert(0, sys.argv[1])
import bench_cpu_vs_llama as b
F = sys.argv[2]
text = lambda name: open(os.path.join(F, name)).read()
f = b.ours_figures(text("bench.txt"))
assert f == {"prefill": "1064.1", "decode": "1162.88", "read": "128", "threads": "2",
             "isa": "products on avx512 (the best of baseline, avx2, avx512 on this machine)"}, f
assert b.ours_figures("refused: no model\n") == {"prefill": "", "decode": "", "read": "", "isa": "", "threads": ""}
assert b.llama_figures(text("llama-bench.jsonl")) == ("68.571", "2.500")
assert b.llama_figures("error: no model\n") == ("NA", "NA")
try:
    b.llama_figures("{not json\n")
    raise AssertionError("a broken JSON line was read")
except ValueError:
    pass
plan = "golden plan: m on cases/smoke.json\n  model: qwen\n  noise: 3\n estimate: 12 s\nREFUSED: too big\n"
assert b.plan_lines(plan) == ["    golden plan: m on cases/smoke.json", "    model: qwen", "    estimate: 12 s",
                              "    REFUSED: too big"], b.plan_lines(plan)
for tsv, want in (("results.tsv", "summary.txt"), ("results-1-round.tsv", "summary-1-round.txt")):
    rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(F, tsv)) if l.strip()]
    got = "\n".join(b.summary_lines(rows)) + "\n"
    assert got == text(want), "summary of %s:\n%s" % (tsv, got)
PY
# Bad options: exit 2, with what was expected and what was found.
bench() { bash "$SRC/scripts/bench-cpu-vs-llama.sh" --bin "$BIN" "$@"; }
expect_exit 2 bench --reps 0
expect_out "bench-cpu-vs-llama.sh: --reps '0': expected a positive integer"
expect_exit 2 bench --isa "auto sse"
expect_out "--isa 'sse': expected auto, baseline, avx2 or avx512"
expect_exit 2 bench --plan-args "memory-gb 128"
expect_out "--plan-args 'memory-gb 128': expected options of golden --plan"
expect_exit 2 bench --prefill
expect_out "--prefill needs a value"
expect_exit 2 bench --treads 2
expect_out "unknown argument '--treads' (expected --threads,"
expect_exit 2 bench --model "$WORK"
expect_out "--model '$WORK': no config.json there"
expect_exit 0 bench --help
expect_out "--plan-model DIR|none"
echo "bench-cpu-vs-llama: ok"
