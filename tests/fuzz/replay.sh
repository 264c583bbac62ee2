#!/usr/bin/env bash
# ctest fuzz:replay: every fuzz harness over its seed corpus (made from the committed fixtures by
# make_seeds.py) and over the inputs that once found a bug (tests/fuzz/regressions/<target>).
#   replay.sh DEGEN_FUZZ_REPLAY SOURCE_DIR WORK_DIR TARGET...
set -euo pipefail
BIN="$1"; SRC="$2"; WORK="$3"; shift 3
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not found (make_seeds.py builds the seed corpora)"; exit 77; }
[ -f "$SRC/models/tiny-trained/config.json" ] || { echo "FAIL: $SRC/models/tiny-trained is missing"; exit 1; }
rm -rf "$WORK"; mkdir -p "$WORK"
python3 "$SRC/tests/fuzz/make_seeds.py" "$WORK/seeds"
for t in "$@"; do
  dirs=("$WORK/seeds/$t")
  [ -d "$SRC/tests/fuzz/regressions/$t" ] && dirs+=("$SRC/tests/fuzz/regressions/$t")
  TMPDIR="$WORK" "$BIN" "$t" "${dirs[@]}"
done
