# A deliberate bug in vLLM's GDN decode step, planted into every Python process of a vLLM server
# started with this folder on PYTHONPATH (the API server, its engine core and its workers are separate
# processes, each imports this file at start-up). The installed package is never edited: the module
# vllm.model_executor.layers.mamba.ops.cpu.gdn_attention gets a wrapped recurrent_gated_delta_rule (its
# single-token decode path on the CPU) when it is imported.
#
# The bug is off unless the file named by DEGEN_VLLM_BUG_FLAG exists, read at every call, so that one
# server serves the clean runs and the buggy ones (tests/cli/vllm_real.sh). With it on, each decode step
# reads the state before the step's decay (the same class of bug as tests/llama/gdn-read-before-decay.patch
# plants into llama.cpp): kv_mem = S_{t-1} k_t instead of (g_t S_{t-1}) k_t; prefill (the chunked path)
# is untouched, so teacher-forced scoring of a prompt cannot see it.
import importlib.abc
import importlib.machinery
import os
import sys

TARGET = "vllm.model_executor.layers.mamba.ops.cpu.gdn_attention"


def _buggy(original):
    import torch

    def recurrent_gated_delta_rule(query, key, value, g, beta, initial_state, scale=None, use_qk_l2norm_in_kernel=False):
        flag = os.environ.get("DEGEN_VLLM_BUG_FLAG", "")
        if not flag or not os.path.exists(flag):
            return original(query, key, value, g, beta, initial_state, scale, use_qk_l2norm_in_kernel)
        dtype = query.dtype
        if use_qk_l2norm_in_kernel:
            query = query * torch.rsqrt((query * query).sum(-1, keepdim=True) + 1e-6)
            key = key * torch.rsqrt((key * key).sum(-1, keepdim=True) + 1e-6)
        if query.shape[2] != value.shape[2]:
            r = value.shape[2] // query.shape[2]
            query = query.repeat_interleave(r, dim=2)
            key = key.repeat_interleave(r, dim=2)
        query, key, value, beta, g = [x.transpose(1, 2).contiguous().to(torch.float32) for x in (query, key, value, beta, g)]
        query = query * (scale if scale is not None else query.shape[-1] ** -0.5)
        B, H, T, _ = key.shape
        out = torch.empty(B, H, T, value.shape[-1], dtype=value.dtype)
        S = initial_state.to(value)
        for t in range(T):
            k_t, v_t, q_t = key[:, :, t], value[:, :, t], query[:, :, t]
            kv_mem = (S * k_t.unsqueeze(-2)).sum(-1)  # the bug: read before the decay below
            S = S * g[:, :, t].exp().unsqueeze(-1).unsqueeze(-1)
            S = S + ((v_t - kv_mem) * beta[:, :, t].unsqueeze(-1)).unsqueeze(-1) * k_t.unsqueeze(-2)
            out[:, :, t] = (S * q_t.unsqueeze(-2)).sum(-1)
        return out.transpose(1, 2).contiguous().to(dtype), S

    return recurrent_gated_delta_rule


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        module.recurrent_gated_delta_rule = _buggy(module.recurrent_gated_delta_rule)
        print("degenbisect test: planted the switchable GDN decode bug into %s (pid %d)" % (TARGET, os.getpid()),
              file=sys.stderr, flush=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
