#!/usr/bin/env bash
# Renders every committed report fixture (tests/fixtures/report: the whole folder, compare.json,
# bisect.json and the sweep folder, each alone) in every format `report` writes (md, html, json,
# junit), with its exit code and stderr, so that two builds can be held to byte-identical output.
#   scripts/report-outputs.sh BIN OUT          render into the folder OUT
#   scripts/report-outputs.sh --diff BIN_A BIN_B   render with both and compare: the count of files
#                                                  compared and those that differ (exit 1 if any)
# Runs from the source folder, so a compare result's model (models/tiny-qwen35) gives the texts
# when the models are synthesized, for both binaries alike; MODEL=DIR passes --model DIR instead.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)

render() {
  local bin out input name fmt rc
  bin=$(realpath "$1")
  out=$(realpath -m "$2")
  mkdir -p "$out"
  local fx=tests/fixtures/report
  (
    cd "$SRC"
    for input in "$fx" "$fx/compare.json" "$fx/bisect.json" "$fx/sweep"; do
      name=$(basename "$input")
      for fmt in md html json junit; do
        rc=0
        "$bin" report "$input" --format "$fmt" ${MODEL:+--model "$MODEL"} >"$out/$name.$fmt" 2>"$out/$name.$fmt.stderr" || rc=$?
        echo "$rc" >"$out/$name.$fmt.rc"
      done
    done
  )
}

if [ "${1:-}" = "--diff" ]; then
  [ $# -eq 3 ] || { echo "usage: $0 --diff BIN_A BIN_B" >&2; exit 2; }
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  render "$2" "$work/a"
  render "$3" "$work/b"
  total=0
  differ=0
  for f in "$work"/a/*; do
    total=$((total + 1))
    if ! cmp -s "$f" "$work/b/$(basename "$f")"; then
      differ=$((differ + 1))
      echo "differs: $(basename "$f")"
    fi
  done
  echo "$total files compared ($(ls "$work/a" | grep -vc '\.\(rc\|stderr\)$') outputs, with exit codes and stderr), $differ differ"
  [ "$differ" -eq 0 ]
else
  [ $# -eq 2 ] || { echo "usage: $0 BIN OUT | --diff BIN_A BIN_B" >&2; exit 2; }
  render "$1" "$2"
fi
