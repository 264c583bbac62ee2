#!/usr/bin/env bash
# Builds llama.cpp, the first third-party engine degenbisect puts under test, from its published
# source: the llama.cpp that the PyPI source distribution of llama-cpp-python vendors under
# vendor/llama.cpp (pinned version and SHA-256 below), CPU only, only the targets the tests need
# (llama-server, llama-quantize, and our tools/llama_dump linked against its libllama).
#
#   scripts/build-llama-cpp.sh [--dir DIR] [--patch FILE] [--jobs N] [--targets "T ..."] [--version V]
#                              [--native]
#
#   --dir DIR     where to put the source and the build (default: build/llama.cpp, with --native
#                 build/llama.cpp-native); binaries end up in DIR/build/bin; DIR/ENGINE names the
#                 version, the build flavour and the patch, if any. DIR/src and DIR/build are deleted
#                 and made again, so DIR must be a folder this script made (its .degenbisect-made-by,
#                 scripts/lib/owned-dir.bash, or the BUILT/ENGINE record of an earlier version of the
#                 script), an empty one or none: another is refused (exit 2), untouched
#   --patch FILE  apply FILE (a unified diff against vendor/llama.cpp, -p1) to the copy before
#                 building: a deliberately broken engine for the tests (tests/llama/*.patch)
#   --jobs N      parallel compile jobs (default: nproc)
#   --targets     the llama.cpp targets to build (default: llama-server llama-quantize llama-dump;
#                 with --native llama-bench)
#   --version V   another published llama-cpp-python version than the pinned one (an engine-version
#                 bisect, scripts/version-bisect.sh): its archive is checked by pip against PyPI's
#                 digest only, and the digest is printed
#   --native      build for this machine as llama.cpp builds by default (GGML_NATIVE=ON, Release
#                 -O3, OpenMP) instead of the tests' portable -O1 build: the speed to measure
#                 against (scripts/bench-cpu-vs-llama.sh); ENGINE records it and this CPU's flags
#
# Needs pip (the download) and cmake/g++. Idempotent: a finished build in DIR is reused when its
# version, flavour (portable or native) and patch match. Exit 0 on success, 1 when the download, the
# unpacking, the patch or the build fails, 2 for a bad argument (a --dir refused included).
set -euo pipefail
source "$(dirname "$0")/lib/owned-dir.bash"

VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR=""
PATCH=""
NATIVE=0
TARGETS_GIVEN=0
JOBS="$(nproc 2>/dev/null || echo 2)"

TARGETS="llama-server llama-quantize llama-dump"
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --patch)
      [ -f "${2:-}" ] || { echo "build-llama-cpp.sh: no patch file '${2:-}'" >&2; exit 2; }
      PATCH="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"; shift 2 ;;
    --jobs) JOBS="$2"; shift 2 ;;
    --targets) TARGETS="$2"; TARGETS_GIVEN=1; shift 2 ;;
    --native) NATIVE=1; shift ;;
    --version)
      [[ "${2:-}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "build-llama-cpp.sh: --version '${2:-}': expected a version such as 0.3.35" >&2; exit 2; }
      [ "$2" = "$VERSION" ] || { VERSION="$2"; SHA256=""; }; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build-llama-cpp.sh: unknown argument '$1' (expected --dir, --patch, --jobs, --targets, --version, --native or --help)" >&2; exit 2 ;;
  esac
done

if [ "$NATIVE" = 1 ]; then
  [ -n "$DIR" ] || DIR="$ROOT/build/llama.cpp-native"
  [ "$TARGETS_GIVEN" = 1 ] || TARGETS="llama-bench"
else
  [ -n "$DIR" ] || DIR="$ROOT/build/llama.cpp"
fi
# A build folder of an earlier version of this script, from before the marker: its own BUILT or
# ENGINE record (written by nothing else) names a llama-cpp-python build.
made_before_marker() { case "$(cat "$1/BUILT" "$1/ENGINE" 2>/dev/null | head -n 1)" in "llama-cpp-python "*) true ;; *) false ;; esac; }
DIR="$(owned_abs "$DIR")"
owned_check "$DIR" scripts/build-llama-cpp.sh made_before_marker || exit 2
owned_mark "$DIR" scripts/build-llama-cpp.sh
DIR="$(cd "$DIR" && pwd)"
want="llama-cpp-python $VERSION vendor/llama.cpp -O1"
# A native build is only valid on a CPU with the same instruction sets: the marker names them (a
# hash of /proc/cpuinfo's flags), so a build directory moved to another machine is rebuilt.
[ "$NATIVE" = 1 ] && want="llama-cpp-python $VERSION vendor/llama.cpp -O3 native (cpu flags $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | sha256sum | cut -c1-12))"
[ -n "$PATCH" ] && want="$want + $(basename "$PATCH") $(sha256sum "$PATCH" | cut -c1-16)"
have_all=1
for t in $TARGETS; do [ -x "$DIR/build/bin/$t" ] || have_all=0; done
# Our dump tool is rebuilt when its source changed since the build.
[ -f "$DIR/src/tools/degen-dump/llama_dump.cpp" ] && ! cmp -s "$ROOT/tools/llama_dump.cpp" "$DIR/src/tools/degen-dump/llama_dump.cpp" &&
  have_all=0
if [ -f "$DIR/ENGINE" ] && [ "$(cat "$DIR/ENGINE")" = "$want" ] && [ "$have_all" = 1 ]; then
  echo "build-llama-cpp.sh: $want already built in $DIR ($TARGETS)"
  exit 0
fi
rm -f "$DIR/ENGINE"
# A build of another version or patch is not reused: the unpacked sources keep the archive's old
# timestamps, so make would keep objects compiled from differently patched files.
if [ ! -f "$DIR/BUILT" ] || [ "$(cat "$DIR/BUILT")" != "$want" ]; then rm -rf "$DIR/build"; fi

# 1. The source distribution, checked against the pinned digest (a cache shared by patched copies).
CACHE="${DEGEN_LLAMA_CACHE:-$ROOT/build/llama-sdist}"
TARBALL="$CACHE/llama_cpp_python-$VERSION.tar.gz"
mkdir -p "$CACHE"
if [ ! -f "$TARBALL" ] || { [ -n "$SHA256" ] && ! echo "$SHA256  $TARBALL" | sha256sum -c --status; }; then
  echo "build-llama-cpp.sh: downloading llama-cpp-python==$VERSION (source distribution) from PyPI" >&2
  rm -f "$TARBALL"
  python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation -d "$CACHE" \
    "llama-cpp-python==$VERSION" 2>"$CACHE/pip.log" ||
    python3 -m pip download --quiet --no-deps --no-binary :all: -d "$CACHE" "llama-cpp-python==$VERSION" \
      2>>"$CACHE/pip.log" || {
      echo "build-llama-cpp.sh: pip could not download llama-cpp-python==$VERSION (see $CACHE/pip.log)" >&2
      exit 1
    }
fi
if [ -z "$SHA256" ]; then
  echo "build-llama-cpp.sh: llama-cpp-python $VERSION (not the pinned version): SHA-256 $(sha256sum "$TARBALL" | cut -d' ' -f1)" >&2
elif ! echo "$SHA256  $TARBALL" | sha256sum -c --status; then
  echo "build-llama-cpp.sh: $TARBALL has SHA-256 $(sha256sum "$TARBALL" | cut -d' ' -f1), expected $SHA256" >&2
  exit 1
fi

# 2. vendor/llama.cpp, fresh, with the patch applied if any.
SRC="$DIR/src"
rm -rf "$SRC" "$DIR/unpack"
mkdir -p "$DIR/unpack"
tar -xzf "$TARBALL" -C "$DIR/unpack" "llama_cpp_python-$VERSION/vendor/llama.cpp" 2>"$DIR/unpack.log" || {
  echo "build-llama-cpp.sh: $TARBALL has no llama_cpp_python-$VERSION/vendor/llama.cpp to unpack ($(tail -n 1 "$DIR/unpack.log"))" >&2
  exit 1
}
mv "$DIR/unpack/llama_cpp_python-$VERSION/vendor/llama.cpp" "$SRC"
rm -rf "$DIR/unpack"
if [ -n "$PATCH" ]; then
  (cd "$SRC" && patch -p1 --batch --quiet --forward <"$PATCH" >"$DIR/patch.log" 2>&1) || {
    echo "build-llama-cpp.sh: $PATCH does not apply to llama.cpp from llama-cpp-python $VERSION (see $DIR/patch.log)" >&2
    exit 1
  }
fi
# Our dump tool, built inside llama.cpp's tree so that it links its libraries as its own tools do.
mkdir -p "$SRC/tools/degen-dump"
cp "$ROOT/tools/llama_dump.cpp" "$SRC/tools/degen-dump/llama_dump.cpp"
cat >"$SRC/tools/degen-dump/CMakeLists.txt" <<'EOF'
add_executable(llama-dump llama_dump.cpp)
target_link_libraries(llama-dump PRIVATE llama ggml ${CMAKE_THREAD_LIBS_INIT})
target_compile_features(llama-dump PRIVATE cxx_std_17)
target_include_directories(llama-dump PRIVATE ${PROJECT_SOURCE_DIR}/vendor)
EOF
echo 'add_subdirectory(degen-dump)' >>"$SRC/tools/CMakeLists.txt"

# 3. CPU-only build of the targets the tests need. With ccache (scripts/install-deps.sh installs it),
# the second tree (the deliberate-bug build) and tests/cli/engine_bisect.sh's copy reuse the first
# build's objects: every tree has the same layout (DIR/src, DIR/build) and paths under the repository
# are hashed relative to the compiler's working directory (CCACHE_BASEDIR), so only the files that
# differ are compiled again.
t0=$(date +%s)
LAUNCHER=()
CACHED=0
# Not for --native: -march=native on the command line does not say which CPU the objects are for, so
# a shared cache could hand them to another machine (ggml's own ccache use is turned off too).
if [ "$NATIVE" = 1 ]; then
  LAUNCHER=(-DGGML_CCACHE=OFF)
elif command -v ccache >/dev/null 2>&1; then
  CACHED=1
  export CCACHE_DIR="${CCACHE_DIR:-$ROOT/build/ccache}" CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR=1
  LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
echo "build-llama-cpp.sh: building llama.cpp (CPU) in $DIR/build with $JOBS jobs" >&2
echo "$want" >"$DIR/BUILT"  # what the objects in build/ are compiled from (set before compiling)
# -O1 instead of Release's -O3: the build takes about a third less (src/llama-model.cpp: 6.3-6.8 s
# against 10.0-10.2 s; the clean build beside ours 593 s against 772 s, measured 2026-12-06), and the
# tests' models are so small that llama-server's time goes to HTTP and JSON, not to its kernels. The
# numbers move in their last bits (ggml is built for AVX2 with FMA, and where GCC fuses and vectorises
# differs by level): the trained model's smoke cases, mean KLD against the fp32 record, two-plus-two
# 1.90e-13 at -O1 and 1.93e-13 at -O3, every case within rounding of the other. No test depends on
# those bits: each judges against the record's floors, or compares two APIs of the same server.
# --native: llama.cpp's own defaults for speed (CMake's Release -O3 -DNDEBUG, OpenMP), for this CPU.
if [ "$NATIVE" = 1 ]; then
  FLAVOUR=(-DGGML_NATIVE=ON -DGGML_OPENMP=ON)
else
  FLAVOUR=(-DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DGGML_NATIVE=OFF
           -DGGML_OPENMP=OFF)
fi
cmake -S "$SRC" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release "${FLAVOUR[@]}" -DGGML_CUDA=OFF \
  -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF "${LAUNCHER[@]}" >"$DIR/cmake.log" 2>&1 || {
  echo "build-llama-cpp.sh: cmake failed (see $DIR/cmake.log)" >&2
  tail -20 "$DIR/cmake.log" >&2
  exit 1
}
# shellcheck disable=SC2086
cmake --build "$DIR/build" -j"$JOBS" --target $TARGETS >"$DIR/build.log" 2>&1 || {
  echo "build-llama-cpp.sh: the build failed (see $DIR/build.log)" >&2
  grep -E "error" "$DIR/build.log" | head -20 >&2
  exit 1
}
echo "$want" >"$DIR/ENGINE"
echo "$want" >"$DIR/BUILT"
echo "build-llama-cpp.sh: built $want in $(($(date +%s) - t0)) s: $TARGETS in $DIR/build/bin" >&2
if [ "$CACHED" = 1 ]; then
  echo "build-llama-cpp.sh: ccache in $CCACHE_DIR: $(ccache --print-stats 2>/dev/null |
    awk -F'\t' '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" {h += $2} $1 == "cache_miss" {m = $2}
                 END {printf "%d hits, %d misses so far", h, m}')" >&2
fi
