# `git bisect run` over an engine's history, the README's recipe run for real: a git history of
# llama.cpp (the source scripts/build-llama-cpp.sh unpacked, committed as it is, then four commits,
# one of which is the deliberate Gated DeltaNet bug of tests/llama/gdn-read-before-decay.patch),
# bisected with one command per step: rebuild llama-server (exit 125 when it does not build), then
# `compare --server-cmd` (start it, wait for /health, score it, stop it), whose exit code drives the
# bisect. git must name the bug's commit as the first bad one. Skips without the llama.cpp source or
# the GGUF. The first step builds llama-server: from scratch about 6 min on 2 cores, about a minute
# with ccache when scripts/build-llama-cpp.sh has filled it (same cmake flags, same DIR/src + DIR/build
# layout, so the objects are the same); the other steps recompile one file.
source "$(dirname "$0")/lib.bash"

LLAMA_SRC="${DEGEN_LLAMA_CPP:-$SRC/build/llama.cpp}/src"
GGUF="$SRC/models/tiny-trained-gguf/tiny-trained-f32.gguf"
[ -f "$LLAMA_SRC/CMakeLists.txt" ] || { echo "SKIP: no llama.cpp source in $LLAMA_SRC: run scripts/build-llama-cpp.sh"; exit 77; }
[ -f "$GGUF" ] || { echo "SKIP: no $GGUF: run make gguf"; exit 77; }
command -v git >/dev/null || { echo "SKIP: no git"; exit 77; }
BIN="$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")"  # the steps run inside the engine's checkout
t0=$(date +%s)

# The engine's history.
R="$WORK/engine/src"
mkdir -p "$WORK/engine"
cp -a "$LLAMA_SRC" "$R"
rm -rf "$R/.git"  # the sdist keeps the submodule's .git file, pointing nowhere
g() { git -C "$R" -c user.name=degenbisect -c user.email=tests@degenbisect.invalid "$@"; }
g init -q
g add -A
g commit -qm "llama.cpp as vendored by llama-cpp-python 0.3.36"
good=$(g rev-parse HEAD)
echo "bisect test, commit 1" >>"$R/README.md"; g commit -qam "docs: a line"
(cd "$R" && patch -p1 --batch --quiet <"$SRC/tests/llama/gdn-read-before-decay.patch")
g commit -qam "ggml-cpu: gated delta rule: decay the state after reading it"
bug=$(g rev-parse HEAD)
echo "bisect test, commit 3" >>"$R/README.md"; g commit -qam "docs: another line"
echo "bisect test, commit 4" >>"$R/README.md"; g commit -qam "docs: a third line"

# The README's recipe: the step rebuilds, then scores; 0 good, 1 bad, 125 skip this commit.
# The cmake flags are scripts/build-llama-cpp.sh's, so that ccache serves its objects.
launcher=""
command -v ccache >/dev/null 2>&1 && launcher="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
B="$WORK/engine/build"
cat >"$WORK/step.sh" <<EOF
#!/bin/sh
export CCACHE_DIR="\${CCACHE_DIR:-$SRC/build/ccache}" CCACHE_BASEDIR="\${CCACHE_BASEDIR:-$SRC}" CCACHE_NOHASHDIR=1
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \\
  -DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \\
  -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \\
  -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF \\
  $launcher >>"$WORK/build.log" 2>&1 &&
  cmake --build "$B" -j2 --target llama-server >>"$WORK/build.log" 2>&1 || exit 125
exec "$BIN" -q compare --golden "$SRC/golden/tiny-trained/smoke" --model "$SRC/models/tiny-trained" \\
  --case two-plus-two --no-generate --engine-class fp32 \\
  --server-cmd "$B/bin/llama-server -m $GGUF --host 127.0.0.1 --port {port} -np 1 -t 1 --poll 0 -ctk f32 -ctv f32 -fa off"
EOF
chmod +x "$WORK/step.sh"
g bisect start HEAD "$good" >/dev/null
set +e
(cd "$R" && git bisect run "$WORK/step.sh") >"$WORK/bisect.log" 2>&1
rc=$?
set -e
grep -E "is the first bad commit|verdict|running" "$WORK/bisect.log" || true
[ "$rc" = 0 ] || { tail -30 "$WORK/bisect.log"; tail -20 "$WORK/build.log"; fail "git bisect run exited $rc"; }
grep -q "^$bug is the first bad commit" "$WORK/bisect.log" || { cat "$WORK/bisect.log"; fail "git did not name the bug's commit $bug"; }
grep -q "decay the state after reading it" "$WORK/bisect.log" || fail "the first bad commit is not the GDN one"
g bisect reset -q 2>/dev/null || true
echo "engine bisect: the GDN commit found ($(($(date +%s) - t0)) s)"
