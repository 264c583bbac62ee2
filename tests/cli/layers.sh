# The direction of dependency (docs/architecture.md, scripts/check-layers.sh): the sources keep to it,
# and an include against it (the engine reaching up into the diagnostics, one backend including the
# other, the judging into its subjects) is named with its file, line and the folders allowed.
source "$(dirname "$0")/lib.bash"
expect_exit 0 bash "$SRC/scripts/check-layers.sh" "$SRC"
expect_out "every include keeps to the direction of dependency"
# a copy of the sources with two includes against the direction
mkdir -p "$WORK/copy"
cp -r "$SRC/src" "$SRC/kernels" "$WORK/copy/"
printf '#include "judge/metrics.h"\n' >> "$WORK/copy/src/engine/generate.cpp"
sed -i '1i #include "cuda/context.h"' "$WORK/copy/src/cpu/cpu_backend.cpp"
# the kernels reaching up into the backend that launches them, the CLI past the backends' factory,
# and an include without its folder (which would hide either)
sed -i '1i #include "cuda/context.h"' "$WORK/copy/kernels/matmul.cu"
printf '#include "cpu/gemm.h"\n' >> "$WORK/copy/src/cli/cmd_run.cpp"
printf '#include "common.cuh"\n' >> "$WORK/copy/kernels/rope.cu"
# the judging reaching up into what it judges, and a subject into the diagnostics that run it
printf '#include "subjects/engine.h"\n' >> "$WORK/copy/src/judge/compare.cpp"
printf '#include "diag/sweep.h"\n' >> "$WORK/copy/src/subjects/server/probes.cpp"
expect_exit 1 bash "$SRC/scripts/check-layers.sh" "$WORK/copy"
cat "$WORK/out"
expect_out 'engine may not include "judge/metrics.h" (engine may include: util model engine)'
expect_out 'src/cpu/cpu_backend.cpp:1: cpu may not include "cuda/context.h"'
expect_out 'kernels/matmul.cu:1: kernels may not include "cuda/context.h" (kernels may include: util kernels)'
expect_out 'cli may not include "cpu/gemm.h"'
expect_out "kernels/rope.cu:$(wc -l <"$WORK/copy/kernels/rope.cu"): \"common.cuh\" has no folder"
expect_out 'src/judge/compare.cpp:'"$(wc -l <"$WORK/copy/src/judge/compare.cpp")"': judge may not include "subjects/engine.h" (judge may include: util model engine record judge)'
expect_out 'subjects may not include "diag/sweep.h"'
[ "$(wc -l <"$WORK/out")" = 7 ] || fail "expected exactly the seven planted includes"
# a new folder of src/ must be placed in the table
mkdir "$WORK/copy/src/newpart"
expect_exit 1 bash "$SRC/scripts/check-layers.sh" "$WORK/copy"
expect_out "src/newpart: a folder the layer table does not know"
echo ok
