#!/usr/bin/env bash
# What loading the model once saves: a 24-cell sweep of a golden record's cases in one process
# (`degenbisect sweep`) against the same 24 configurations run as 24 separate processes
# (`degenbisect compare`, each loading the model and tokenizer again, the way restarting a server
# per configuration does). Both in the same run on the same machine, so their ratio is what to read.
#
#   scripts/bench-sweep.sh [BIN] [MODEL] [GOLDEN] [BASE]
#     BIN     degenbisect binary (default build/degenbisect)
#     MODEL   model folder (default models/tiny-qwen35, synthesized if absent)
#     GOLDEN  its golden record (default golden/tiny-qwen35/smoke)
#     BASE    toggles of every cell (default precision=bf16; backend=cuda on a GPU machine)
# The 24 cells: attn {naive, flash, splitkv} x ssm_dtype {fp32, bf16} x mtp {0, 2} x kv_dtype {bf16, fp8}.
# Note: on the tiny models a load takes milliseconds, so the ratio is near 1 there; the saving grows
# with the model (a 27B checkpoint takes tens of seconds to load, a server restart minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/degenbisect}
model=${2:-models/tiny-qwen35}
golden=${3:-golden/tiny-qwen35/smoke}
base=${4:-precision=bf16}
[ -x "$bin" ] || { echo "bench-sweep: no binary at $bin (run make build)" >&2; exit 128; }
[ -d "$golden" ] || { echo "bench-sweep: no golden record at $golden" >&2; exit 128; }
if [ ! -f "$model/config.json" ]; then
  case "$model" in
    models/*) "$bin" synth --preset "$(basename "$model")" --out "$model" >/dev/null ;;
    *) echo "bench-sweep: no model at $model" >&2; exit 128 ;;
  esac
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
now() { date +%s.%N; }

cells=()
for a in naive flash splitkv; do
  for s in fp32 bf16; do
    for m in 0 2; do
      for k in bf16 fp8; do cells+=("attn=$a,ssm_dtype=$s,mtp=$m,kv_dtype=$k"); done
    done
  done
done

echo "bench-sweep: ${#cells[@]} cells of $golden on $model, base $base"
t0=$(now)
set +e
"$bin" -q sweep --golden "$golden" --model "$model" --base "$base" --axis attn=naive,flash,splitkv \
  --axis ssm_dtype=fp32,bf16 --axis mtp=0,2 --axis kv_dtype=bf16,fp8 --out "$tmp/sweep" > "$tmp/sweep.log" 2>&1
rc=$?
set -e
t_sweep=$(echo "$(now) - $t0" | bc)
[ "$rc" -le 1 ] || { cat "$tmp/sweep.log" >&2; echo "bench-sweep: sweep exited $rc" >&2; exit "$rc"; }
n_done=$(wc -l < "$tmp/sweep/results.jsonl")

t0=$(now)
for c in "${cells[@]}"; do
  set +e
  "$bin" -q compare --golden "$golden" --model "$model" --config "$base,$c" > /dev/null 2>&1
  rc=$?
  set -e
  [ "$rc" -le 1 ] || [ "$rc" = 125 ] || { echo "bench-sweep: compare --config $base,$c exited $rc" >&2; exit "$rc"; }
done
t_sep=$(echo "$(now) - $t0" | bc)

printf 'sweep (model loaded once):          %8.2f s for %s cells\n' "$t_sweep" "$n_done"
printf '%s processes (load + compare each): %8.2f s\n' "${#cells[@]}" "$t_sep"
printf 'ratio separate / sweep:             %8.2f\n' "$(echo "$t_sep / $t_sweep" | bc -l)"
