#!/usr/bin/env bash
# Copies the build dependencies that a bare GPU machine lacks (no internet, no apt there) from THIS
# machine's Debian packages into .devdeps/ (git-ignored), laid out like /usr, so that
# scripts/gpu-check.sh can configure with -DCMAKE_PREFIX_PATH=$PWD/.devdeps/usr:
#   headers   eigen3, CLI11, nlohmann-json, doctest, utf8proc.h
#   CMake     Eigen3, nlohmann_json, CLI11, doctest package configs (doctest's hard-coded /usr prefix
#             made relative to the config file)
#   library   libutf8proc.so and its SONAME libutf8proc.so.2 (real files, no links), libutf8proc.pc
#             with a relocatable prefix (CMake finds utf8proc with or without pkg-config).
# Usage: scripts/stage-device-deps.sh [OUT_DIR]   (default: .devdeps in the repository root; OUT_DIR
# is relative to the folder the script is run from). OUT_DIR is replaced: it must be a folder this
# script made (its .degenbisect-made-by, scripts/lib/owned-dir.bash), an empty one or none; another
# is refused (exit 2), untouched.
# Needs: libeigen3-dev nlohmann-json3-dev libcli11-dev doctest-dev libutf8proc-dev installed here
# (scripts/install-deps.sh installs them). Exit 0 when staged, 1 when a package is missing here.
set -euo pipefail
source "$(dirname "$0")/lib/owned-dir.bash"
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(owned_abs "${1:-$root/.devdeps}")"
# A staged tree of an earlier version of this script, from before the marker: usr/ alone, laid out as above.
made_before_marker() { [ "$(ls -A "$1")" = usr ] && [ -f "$1/usr/include/utf8proc.h" ] && [ -d "$1/usr/lib/cmake/doctest" ]; }
owned_check "$out" scripts/stage-device-deps.sh made_before_marker || exit 2
arch="$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)"
arch="${arch/-pc-/-}"
u="$out/usr"

need() { [ -e "$1" ] || { echo "stage-device-deps: $1 is missing here (install $2)" >&2; exit 1; }; }
need /usr/include/eigen3 libeigen3-dev
need /usr/share/eigen3/cmake/Eigen3Config.cmake libeigen3-dev
need /usr/include/nlohmann nlohmann-json3-dev
need /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake nlohmann-json3-dev
need /usr/include/CLI libcli11-dev
need /usr/share/cmake/CLI11/CLI11Config.cmake libcli11-dev
need /usr/include/doctest doctest-dev
need /usr/lib/cmake/doctest/doctestConfig.cmake doctest-dev
need /usr/include/utf8proc.h libutf8proc-dev
need "/usr/lib/$arch/libutf8proc.so" libutf8proc-dev

owned_fresh "$out" scripts/stage-device-deps.sh made_before_marker || exit 2
mkdir -p "$u/include" "$u/share/cmake" "$u/lib/cmake" "$u/lib/$arch/pkgconfig" "$u/share/eigen3"
cp -r /usr/include/eigen3 /usr/include/nlohmann /usr/include/CLI /usr/include/doctest /usr/include/utf8proc.h "$u/include/"
cp -r /usr/share/eigen3/cmake "$u/share/eigen3/"
cp -r /usr/share/cmake/nlohmann_json /usr/share/cmake/CLI11 "$u/share/cmake/"
cp -r /usr/lib/cmake/doctest "$u/lib/cmake/"
# doctestTargets.cmake names the prefix /usr literally: make it the staged tree.
sed -i 's|set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  "$u/lib/cmake/doctest/doctestTargets.cmake"
soname="$(objdump -p "/usr/lib/$arch/libutf8proc.so" 2>/dev/null | awk '/SONAME/ {print $2}')"
cp -L "/usr/lib/$arch/libutf8proc.so" "$u/lib/$arch/libutf8proc.so"
[ -n "$soname" ] && cp -L "/usr/lib/$arch/libutf8proc.so" "$u/lib/$arch/$soname"
sed 's|^prefix=.*|prefix=${pcfiledir}/../../..|' "/usr/lib/$arch/pkgconfig/libutf8proc.pc" > "$u/lib/$arch/pkgconfig/libutf8proc.pc"
echo "stage-device-deps: staged into $out ($(du -sh "$out" | cut -f1)); use -DCMAKE_PREFIX_PATH=$u"
