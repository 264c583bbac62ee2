# The CPU reference's products under each ISA (util/cpu_isa.h, issue 45): --version, inspect, bench and
# golden name the one in use; DEGEN_CPU_ISA forces one and a bad value is an input error (128); the
# golden manifest records it; a record made under the baseline ISA compares good under the best one
# this machine has and the other way round (the floors absorb the change of the last bits); AVX2 and
# AVX-512 records hold the same bytes; and the HF fixtures pass under every ISA this machine has.
source "$(dirname "$0")/lib.bash"
TESTS="$(dirname "$BIN")/tests/degen_tests"

expect_exit 0 "$BIN" --version
expect_out "CPU products: "
best=$(sed -n 's/^CPU products: \([a-z0-9]*\) (the best.*/\1/p' "$WORK/out")
[ -n "$best" ] || fail "--version does not name the best ISA: $(cat "$WORK/out")"
DEGEN_CPU_ISA=baseline expect_exit 0 "$BIN" --version
expect_out "CPU products: baseline (forced by DEGEN_CPU_ISA; this machine has $best)"
DEGEN_CPU_ISA=sse9 expect_exit 128 "$BIN" inspect "$SRC/models/tiny-trained"
expect_out "DEGEN_CPU_ISA='sse9': expected baseline, avx2 or avx512"
expect_exit 0 "$BIN" inspect "$SRC/models/tiny-trained"
expect_out "cpu          the reference's products on $best"
if [ "$best" != avx512 ]; then
  DEGEN_CPU_ISA=avx512 expect_exit 128 "$BIN" inspect "$SRC/models/tiny-trained"
  expect_out "supports only up to $best"
fi
isas="baseline"
[ "$best" = baseline ] || isas="baseline avx2"
[ "$best" != avx512 ] || isas="baseline avx2 avx512"

# A record under the baseline ISA and one under the best, each compared under the other. Two short
# cases of the trained model, floors measured (they are what judges the difference).
m="$SRC/models/tiny-trained"
cat >"$WORK/cases.json" <<'JSON'
{"suite": "isa", "defaults": {"max_new_tokens": 6},
 "cases": [{"id": "sum", "prompt": "What is 2+2?"}, {"id": "raw", "raw": "red green blue, red green blue,"}]}
JSON
DEGEN_CPU_ISA=baseline expect_exit 0 "$BIN" golden --model "$m" --cases "$WORK/cases.json" --out "$WORK/g-baseline"
DEGEN_CPU_ISA=$best expect_exit 0 "$BIN" golden --model "$m" --cases "$WORK/cases.json" --out "$WORK/g-$best"
expect_out "products on $best (forced by DEGEN_CPU_ISA"
grep -q '"cpu_isa": "baseline"' "$WORK/g-baseline/manifest.json" || fail "the baseline record's manifest lacks cpu_isa"
grep -q "\"cpu_isa\": \"$best\"" "$WORK/g-$best/manifest.json" || fail "the $best record's manifest lacks cpu_isa"
if [ "$best" != baseline ]; then
  # The two ISAs compute differently (else this test would show nothing): the records' logits differ.
  ! cmp -s "$WORK/g-baseline/sum.safetensors" "$WORK/g-$best/sum.safetensors" ||
    fail "the baseline and $best records are byte-identical: the ISA choice changed nothing"
fi
if [ "$best" = avx512 ]; then
  # The record is made of prefill passes (the GEMM: one fused multiply-add chain per element under AVX2
  # and AVX-512 alike) and the GDN's loops (the same operations per element under every ISA): an AVX2
  # record holds the AVX-512 record's bytes, case for case.
  DEGEN_CPU_ISA=avx2 expect_exit 0 "$BIN" golden --model "$m" --cases "$WORK/cases.json" --out "$WORK/g-avx2" --no-floors
  for c in sum raw; do
    cmp "$WORK/g-avx2/$c.safetensors" "$WORK/g-avx512/$c.safetensors" >&2 ||
      fail "case $c: the avx2 record's data differs from the avx512 one's (the GEMM or the GDN loops differ by ISA)"
  done
fi
DEGEN_CPU_ISA=$best expect_exit 0 "$BIN" compare --golden "$WORK/g-baseline" --model "$m"
expect_out "verdict: good (exit 0)"
DEGEN_CPU_ISA=baseline expect_exit 0 "$BIN" compare --golden "$WORK/g-$best" --model "$m"
expect_out "verdict: good (exit 0)"
# ... and a planted bug is still found across ISAs (the comparison is not blind).
DEGEN_CPU_ISA=$best expect_exit 1 "$BIN" -q compare --golden "$WORK/g-baseline" --model "$m" --config fault=gdn-read-before-decay

# The reference against HF transformers' fixtures under every ISA this machine has (the fp32 ones:
# fp64 runs no ISA kernel).
if [ -x "$TESTS" ]; then
  for isa in $isas; do
    DEGEN_CPU_ISA=$isa expect_exit 0 "$TESTS" --test-case="engine: fp32 reference matches HF*,engine: the trained model matches HF*,engine: generate() reproduces HF*"
    grep -qE 'test cases: +[4-9] \| +[4-9] passed' "$WORK/out" || { cat "$WORK/out" >&2; fail "HF fixture tests did not all run and pass under $isa"; }
  done
else
  echo "note: $TESTS not built: the HF fixtures were not run under each ISA" >&2
fi
echo "cpu_isa: ok (best ISA here: $best; HF fixtures under: $isas)"
