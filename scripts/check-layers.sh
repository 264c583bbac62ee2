#!/usr/bin/env bash
# The direction of dependency (docs/architecture.md): each folder of src/ (and kernels/) may include
# only the folders listed for it below, and every include names its folder (a folder-less one would
# be invisible here). The build enforces the same direction at link time (CMakeLists.txt,
# degen_layer_link_*). Prints every include that breaks it, as
#   FILE:LINE: FOLDER may not include "PATH" (FOLDER may include: ...)
# and exits 1; exits 0 when every include keeps to the table. Usage: scripts/check-layers.sh [ROOT]
# (ROOT: the repository, default this script's). Run by the test cli:layers on every `make test`.
set -euo pipefail
root=${1:-"$(cd "$(dirname "$0")/.." && pwd)"}
declare -A allowed=(
  [util]="util"
  [net]="util net"
  [model]="util model"
  [engine]="util model engine"
  [cpu]="util model engine cpu"
  [kernels]="util kernels"
  [cuda]="util model engine kernels cuda"
  [backends]="util model engine cpu cuda kernels backends"
  [record]="util model engine record"
  [judge]="util model engine record judge"
  [subjects]="util net model engine record judge subjects"
  [diag]="util net model engine record judge subjects diag"
  [report]="util net model engine record judge subjects diag report"
  [cli]="util net model engine backends record judge subjects diag report cli"
)
# Headers CMake generates into the build folder, the only includes without a folder.
generated=" build_config.h curl_config.h "
bad=0
for folder in "${!allowed[@]}"; do
  dir="$root/src/$folder"
  [ "$folder" = kernels ] && dir="$root/kernels"
  [ -d "$dir" ] || { echo "check-layers: $dir is missing (expected a folder of the table)" >&2; exit 128; }
  # every '#include "X/..."' of the folder's sources, as FILE:LINE:X/...
  while IFS= read -r hit; do
    file=${hit%%:*}; rest=${hit#*:}; line=${rest%%:*}
    inc=${rest#*:}; inc=${inc#*\"}; inc=${inc%%\"*}   # the text between the quotes (no fork per line)
    top=${inc%%/*}
    if [ "$top" = "$inc" ]; then   # no folder: only a generated header; every other one names its folder
      case "$generated" in
        *" $inc "*) continue ;;
      esac
      echo "${file#"$root"/}:$line: \"$inc\" has no folder (include it as \"FOLDER/$inc\", so that this check sees it)"
      bad=1
      continue
    fi
    case " ${allowed[$folder]} " in
      *" $top "*) ;;
      *) echo "${file#"$root"/}:$line: $folder may not include \"$inc\" ($folder may include: ${allowed[$folder]})"
         bad=1 ;;
    esac
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$dir" --include='*.h' --include='*.cpp' \
             --include='*.cu' --include='*.cuh' || true)
done
# folders of src/ the table does not know
for d in "$root"/src/*/; do
  f=$(basename "$d")
  [ -n "${allowed[$f]+x}" ] || { echo "src/$f: a folder the layer table does not know (add it to scripts/check-layers.sh and docs/architecture.md)"; bad=1; }
done
if [ "$bad" = 0 ]; then echo "check-layers: every include keeps to the direction of dependency"; fi
exit "$bad"
