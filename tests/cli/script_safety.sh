# The scripts under scripts/ delete only what they made (scripts/lib/owned-dir.bash): a folder a user
# names as a script's output, without the marker the script writes when it makes one, is refused
# with what was expected and what was found, and left as it was; and a relative path a user gives is
# resolved against the folder the script is run from, not the repository root. Checked for each
# script that deletes a folder a user can name: seed-replay.sh (SEED_OUT), demo.sh (DEMO_OUT),
# version-bisect.sh (--work's versions/), build-llama-cpp.sh (--dir), fuzz.sh (--build, and its
# target names, which reach a bash -c command), stage-device-deps.sh (OUT_DIR) and
# bench-cpu-vs-llama.sh (--preset names a folder under build/; --model), make-realvocab-model.sh (--out),
# install-vllm-cpu.sh (--dir).
# Nothing is built, installed or downloaded: the scripts run against stand-ins (a degenbisect that
# stops at the first command, a cmake and compiler that do nothing, an empty source archive) and
# stop at their first real step. The scripts run from a copy of scripts/ (and tools/) in a stand-in repository
# ($WORK/tree, with its own golden/ and build/), so that a script that resolves a path against its
# repository harms the copy, never this checkout. A few seconds.
source "$(dirname "$0")/lib.bash"
command -v git >/dev/null || { echo "SKIP: no git"; exit 77; }
T="$WORK/tree"
mkdir -p "$T/golden/tiny-trained/smoke" "$T/build" "$WORK/caller" "$WORK/stubs"
cp -r "$SRC/scripts" "$SRC/tools" "$T/"  # tools/: the programs some scripts run
echo committed >"$T/golden/tiny-trained/smoke/manifest.json"
echo kept >"$T/build/keep"
M=.degenbisect-made-by
# A degenbisect that stops every script at its first command (an input error, as a bad model gives).
STUB="$WORK/stubs/degenbisect"
printf '#!/bin/sh\necho "stand-in degenbisect: $*" >&2\nexit 128\n' >"$STUB"
chmod +x "$STUB"
# user_folder DIR: a folder of the user's, with files in it and in a subfolder.
user_folder() { mkdir -p "$1/src" "$1/build" "$1/seeds"; for f in keep src/keep build/keep seeds/keep; do echo mine >"$1/$f"; done; }
# intact DIR WHAT: DIR still holds every file user_folder put there.
intact() { for f in keep src/keep build/keep seeds/keep; do [ -f "$1/$f" ] || fail "$2 deleted $1/$f (a folder without $M)"; done; }
refused() { expect_out "refusing to use $1"; expect_out "expected no folder there, an empty one, or one that"; expect_out "found a folder without $M"; }
cd "$WORK/caller"

# seed-replay.sh and demo.sh: SEED_OUT and DEMO_OUT.
for s in seed-replay:SEED_OUT demo:DEMO_OUT; do
  script=${s%%:*} var=${s#*:}
  user_folder "$WORK/mine-$script"
  expect_exit 128 env "$var=$WORK/mine-$script" bash "$T/scripts/$script.sh" "$STUB"
  intact "$WORK/mine-$script" "$script.sh"
  refused "$WORK/mine-$script"
  # Relative to the caller's folder: golden here is a new folder in $WORK/caller, and the
  # repository's golden/ is not touched.
  expect_exit 128 env "$var=golden" bash "$T/scripts/$script.sh" "$STUB"
  [ -f "$T/golden/tiny-trained/smoke/manifest.json" ] || fail "$var=golden run from another folder emptied the repository's golden/"
  [ "$(cat "$WORK/caller/golden/$M" 2>/dev/null)" = "scripts/$script.sh" ] ||
    fail "$var=golden was not made in the caller's folder ($WORK/caller/golden) with the marker naming scripts/$script.sh"
  # Its own folder, from an earlier run, is replaced.
  echo old >"$WORK/caller/golden/stale"
  expect_exit 128 env "$var=golden" bash "$T/scripts/$script.sh" "$STUB"
  [ ! -e "$WORK/caller/golden/stale" ] || fail "$script.sh did not replace its own output folder"
  rm -rf "$WORK/caller/golden"
done
# A folder made by the other script is not this one's either.
expect_exit 128 env DEMO_OUT=x bash "$T/scripts/demo.sh" "$STUB"
expect_exit 128 env SEED_OUT=x bash "$T/scripts/seed-replay.sh" "$STUB"
expect_out "found a folder made by scripts/demo.sh"

# version-bisect.sh: --work's versions/ (the throwaway repository of versions) is replaced on every
# bisect; a versions/ that it did not make is refused before any step runs.
mkdir -p "$WORK/vw"
user_folder "$WORK/vw/versions"
expect_exit 2 env DEGENBISECT="$STUB" bash "$T/scripts/version-bisect.sh" --engine sglang --work "$WORK/vw" \
  --good 1.0 --bad 1.2 --versions "1.0 1.1 1.2" -- --server-cmd '@ENGINE@ --port {port}'
intact "$WORK/vw/versions" version-bisect.sh
refused "$WORK/vw/versions"

# build-llama-cpp.sh --dir: it deletes DIR/build and DIR/src before unpacking; a folder of the user's
# is refused. The archive is an empty stand-in in the cache (an unpinned version: no download).
mkdir -p "$WORK/sdist"
tar -czf "$WORK/sdist/llama_cpp_python-0.3.1.tar.gz" -T /dev/null
user_folder "$WORK/mine-llama"
expect_exit 2 env DEGEN_LLAMA_CACHE="$WORK/sdist" bash "$T/scripts/build-llama-cpp.sh" --version 0.3.1 --dir "$WORK/mine-llama"
intact "$WORK/mine-llama" build-llama-cpp.sh
refused "$WORK/mine-llama"
# A build folder of an earlier version of the script (its BUILT record, no marker) is its own: taken.
mkdir -p "$WORK/old-llama/build"
echo "llama-cpp-python 0.3.1 vendor/llama.cpp -O1" >"$WORK/old-llama/BUILT"
expect_exit 1 env DEGEN_LLAMA_CACHE="$WORK/sdist" bash "$T/scripts/build-llama-cpp.sh" --version 0.3.1 --dir "$WORK/old-llama"
[ "$(cat "$WORK/old-llama/$M" 2>/dev/null)" = scripts/build-llama-cpp.sh ] || fail "build-llama-cpp.sh did not take its own earlier build folder"

# fuzz.sh: --build DIR (DIR/seeds is deleted and rebuilt every run); a stand-in compiler that links
# anything and a cmake that configures a list of two targets and builds nothing.
printf '#!/bin/sh\nb=\nwhile [ $# -gt 0 ]; do case "$1" in -B) b=$2; shift 2 ;; --build) exit 0 ;; *) shift ;; esac; done\n' >"$WORK/stubs/cmake"
printf '[ -z "$b" ] || { mkdir -p "$b" && printf "config\\nreplay\\n" >"$b/fuzz-targets.txt" && echo DEGEN_FUZZ:BOOL=ON >"$b/CMakeCache.txt"; }\n' >>"$WORK/stubs/cmake"
printf '#!/bin/sh\ncat >/dev/null\n' >"$WORK/stubs/cxx"
chmod +x "$WORK/stubs/cmake" "$WORK/stubs/cxx"
fuzz() { env PATH="$WORK/stubs:$PATH" FUZZ_CXX=cxx FUZZ_CC=cxx bash "$T/scripts/fuzz.sh" --seconds 1 --jobs 1 "$@"; }
# A build folder of another project (its CMakeCache.txt is not a fuzz build) is refused.
user_folder "$WORK/mine-fuzz"
echo "CMAKE_BUILD_TYPE:STRING=Release" >"$WORK/mine-fuzz/CMakeCache.txt"
echo config >"$WORK/mine-fuzz/fuzz-targets.txt"
expect_exit 2 fuzz --build "$WORK/mine-fuzz" config
intact "$WORK/mine-fuzz" fuzz.sh
refused "$WORK/mine-fuzz"
# Relative to the caller's folder.
expect_exit 2 fuzz --build rel-fuzz no-such-target
expect_out "unknown target 'no-such-target'"
[ ! -e "$T/rel-fuzz" ] || fail "fuzz.sh --build rel-fuzz made its folder in the repository, not in the caller's folder"
[ "$(cat "$WORK/caller/rel-fuzz/$M" 2>/dev/null)" = scripts/fuzz.sh ] || fail "fuzz.sh --build rel-fuzz: no marked folder in the caller's folder"
# A target name is a name, not a pattern or a command: refused (exit 2), nothing run.
# (the checkout's own script: it reads the seed fixtures; everything it writes goes under --build)
expect_exit 2 env PATH="$WORK/stubs:$PATH" FUZZ_CXX=cxx FUZZ_CC=cxx bash "$SRC/scripts/fuzz.sh" --seconds 1 --jobs 1 \
  --build "$WORK/fz" "config\\|\$(touch $WORK/fuzz-injected)"
expect_out "unknown target"
[ ! -e "$WORK/fuzz-injected" ] || fail "a fuzz.sh target name ran a command"

# stage-device-deps.sh OUT_DIR: refused before anything is copied (even where the packages are missing).
user_folder "$WORK/mine-deps"
expect_exit 2 bash "$T/scripts/stage-device-deps.sh" "$WORK/mine-deps"
intact "$WORK/mine-deps" stage-device-deps.sh
refused "$WORK/mine-deps"

# bench-cpu-vs-llama.sh: --preset NAME names the folder build/bench-cpu-vs-llama/NAME, rewritten
# when unfinished (no NAME.done beside it); a folder there that it did not write is refused, and
# '..' (build/ itself, where synth would have written) is no preset name. --model DIR is the caller's.
user_folder "$T/build/bench-cpu-vs-llama/mine"
expect_exit 2 bash "$T/scripts/bench-cpu-vs-llama.sh" --bin "$STUB" --preset mine
intact "$T/build/bench-cpu-vs-llama/mine" bench-cpu-vs-llama.sh
refused "$T/build/bench-cpu-vs-llama/mine"
expect_exit 2 bash "$T/scripts/bench-cpu-vs-llama.sh" --bin "$STUB" --preset ..
expect_out "--preset '..': expected a preset name"
mkdir -p "$WORK/caller/m"
echo '{}' >"$WORK/caller/m/config.json"
expect_exit 2 bash "$T/scripts/bench-cpu-vs-llama.sh" --bin "$STUB" --model m --threads 0
expect_out "--threads '0': expected a positive integer"
# make-realvocab-model.sh --out DIR: refused unless it made DIR (before any download), relative to the
# caller's folder.
user_folder "$WORK/caller/rv"
expect_exit 1 bash "$T/scripts/make-realvocab-model.sh" --bin "$STUB" --out rv
intact "$WORK/caller/rv" make-realvocab-model.sh
refused "$WORK/caller/rv"
# install-vllm-cpu.sh --dir DIR: refused unless it made DIR (before any download), relative to the
# caller's folder.
user_folder "$WORK/caller/venv"
expect_exit 2 bash "$T/scripts/install-vllm-cpu.sh" 0.22.1 --dir venv
intact "$WORK/caller/venv" install-vllm-cpu.sh
refused "$WORK/caller/venv"
echo "script safety: ok"
