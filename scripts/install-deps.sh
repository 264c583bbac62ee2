#!/usr/bin/env bash
# Installs the Debian packages degenbisect needs to build and test, if any is missing.
# Idempotent and silent when everything is present. `--browser` also installs Chromium
# (used only by the HTML report's screenshot test, which skips without it); `--fuzz` clang and
# libFuzzer (make fuzz).
# The CUDA toolkit is not installed here: the CUDA backend is built only when nvcc exists.
set -euo pipefail

# python3-jinja2: renders the official chat template for tests/cli/chat_fixtures.sh (which skips without it);
# ccache: the llama.cpp builds of scripts/build-llama-cpp.sh and tests/cli/engine_bisect.sh share objects
pkgs=(cmake g++ make pkg-config libeigen3-dev libcli11-dev nlohmann-json3-dev doctest-dev libutf8proc-dev libcurl4-openssl-dev
      python3-jinja2 ccache)
for arg in "$@"; do
  case "$arg" in
    --browser) pkgs+=(chromium) ;;
    --fuzz) pkgs+=(clang libclang-rt-14-dev) ;;  # libFuzzer for scripts/fuzz.sh (Debian 12's clang is 14)
    -h|--help) echo "usage: scripts/install-deps.sh [--browser] [--fuzz]"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (expected --browser or --fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps.sh: installing ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install-deps.sh: missing packages: ${missing[*]}; run as root or install them with apt-get" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
if ! $sudo apt-get update -qq >/dev/null || ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
  echo "install-deps.sh: apt-get could not install: ${missing[*]}" >&2
  echo "install-deps.sh: install them by hand (Debian 12 package names) and run again" >&2
  exit 1
fi
