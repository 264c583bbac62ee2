# scripts/version-bisect.sh's bisect logic (issue 42), without installing anything: each "version" of
# SGLang is a stand-in virtual environment whose python answers `-m pip show sglang` with its version
# (so the step reuses it and runs pip for nothing), and DEGENBISECT is a stand-in for compare that
# exits 0 or 1 by the version in the server command it is given. Both directions: a regression (good
# older: the first bad release) and a fix (bad older, the seed's SGLang 0.5.9 -> 0.5.11: the first
# fixed release, git's old/new terms with the step's exit codes swapped); --each prints each step's
# exit code; bad arguments are exit 2 before anything runs. The real run (llama-cpp-python 0.3.35
# and 0.3.36 built from source) is in docs/server.md: minutes per build, not in CI.
source "$(dirname "$0")/lib.bash"
command -v git >/dev/null || { echo "SKIP: no git"; exit 77; }
VB="$SRC/scripts/version-bisect.sh"
VERS="0.5.8 0.5.9 0.5.10 0.5.11 0.5.12"
for v in $VERS; do
  mkdir -p "$WORK/w/venv-sglang-$v/bin"
  printf '#!/bin/sh\n[ "$1 $2 $3 $4" = "-m pip show sglang" ] && echo "Version: %s"\nexit 0\n' "$v" >"$WORK/w/venv-sglang-$v/bin/python"
  chmod +x "$WORK/w/venv-sglang-$v/bin/python"
done
fake() {  # FILE BAD-VERSIONS...: a compare that is bad (1) for the versions listed, good (0) otherwise
  local f=$1; shift
  printf '#!/bin/bash\nv=$(echo "$*" | grep -o "venv-sglang-[0-9.]*" | head -1 | sed "s/venv-sglang-//")\n' >"$f"
  printf 'for b in %s; do [ "$v" = "$b" ] && { echo "verdict: bad (exit 1)"; exit 1; }; done\necho "verdict: good (exit 0)"\n' "$*" >>"$f"
  chmod +x "$f"
}
run() { DEGENBISECT="$1" "$VB" --engine sglang --work "$WORK/w" "${@:2}" -- --server-cmd '@ENGINE@ --port {port}'; }

# A fix: 0.5.8 and 0.5.9 bad, 0.5.10 on good; --bad the older one.
fake "$WORK/fixed" 0.5.8 0.5.9
expect_exit 0 run "$WORK/fixed" --good 0.5.12 --bad 0.5.8 --versions "$VERS"
expect_out "looking for the first good one"
expect_out "# first fixed commit: ["
grep -q "# first fixed commit: .* sglang 0.5.10$" "$WORK/out" || { cat "$WORK/out"; fail "the fix is not named at 0.5.10"; }
# A regression: 0.5.11 on bad.
fake "$WORK/broke" 0.5.11 0.5.12
expect_exit 0 run "$WORK/broke" --good 0.5.8 --bad 0.5.12 --versions "$VERS"
grep -q "# first bad commit: .* sglang 0.5.11$" "$WORK/out" || { cat "$WORK/out"; fail "the regression is not named at 0.5.11"; }
# --each: each version's step and its exit code.
expect_exit 0 run "$WORK/broke" --each "0.5.10 0.5.11"
expect_out "step 0.5.10: exit 0 (verdict: good (exit 0))"
expect_out "step 0.5.11: exit 1 (verdict: bad (exit 1))"
# Bad arguments: 2, before anything runs.
expect_exit 2 run "$WORK/broke" --good 0.5.8 --bad 0.5.99 --versions "$VERS"
expect_out "must both be in the version list"
expect_exit 2 "$VB" --engine nope --work "$WORK/w" --each 1.0 -- --server-cmd '@ENGINE@'
expect_out "expected sglang, vllm or llama-cpp-python"
expect_exit 2 "$VB" --engine sglang --work "$WORK/w" --each 1.0 -- --server-cmd 'python3 -m sglang.launch_server'
expect_out "no @ENGINE@"
echo "version bisect: ok"
