#!/usr/bin/env python3
"""Copy a Qwen3.5 checkpoint with its Gated DeltaNet heads zero-padded to a larger head dim.

Usage:
  python3 tools/pad_gdn_heads.py --model DIR --out DIR [--head-dim 128]

Why: some engines' GDN kernels take only the head dims real checkpoints have (vLLM's CPU build from
0.23.0 on: 64 or 128; the shipped trained model's are 32). The padded copy computes what the original
computes, up to rounding, so an engine that cannot run the original can still be judged on real text:
record a golden record of the COPY with degenbisect (its own reference) and judge the engine on it.

What changes, per GDN layer (Qwen3.5's split layout: in_proj_qkv, in_proj_z; Qwen3-Next's fused
interleaved in_proj_qkvz is refused):
  in_proj_qkv, conv1d   every q, k and v head's rows (channels) padded with zero rows to the new dim:
                        the padded channels stay 0 through the causal conv and its silu
  in_proj_z             every value head's rows padded with zeros
  out_proj              every value head's columns padded with zeros
  norm.weight           padded with zeros and scaled by
                        sqrt(d_old / d_new) (halved from 32 to 128). The gated RMSNorm averages the squares over the head dim;
                        with the padded entries 0 that mean is d_old / d_new of the original, so the
                        normalised values are sqrt(d_new / d_old) larger, which the weight undoes.
  config.json           linear_key_head_dim and linear_value_head_dim set to the new dim, and
                        rms_norm_eps scaled by (d_k / d_new) * (d_v / d_new) (1/16 from 32 to 128)
Unchanged: the L2-normalised q and k (zeros add nothing to a norm); the delta rule's state in the
padded rows and columns stays 0. The query scale 1/sqrt(d_k) becomes 1/sqrt(d_new), so the delta
rule's output o is sqrt(d_k / d_new) of the original, and the gated norm's mean square over the padded
head is (d_k / d_new) * (d_v / d_new) of the original's. The gated RMSNorm is scale-invariant only up
to its epsilon, and o is small in a trained model (its mean square comes near 1e-6, this model's
epsilon): the epsilon scaled by the same factor, with the weight above, makes the gated norm's output
the original's exactly (in real numbers). The epsilon is one value for every RMSNorm of the model:
the others (mean squares of the order of 1) move by less than 1e-6 relative. The MTP head has no GDN
layer and is copied as it is, as are the embeddings, the attention layers and the
tokenizer. Weights keep their dtype.
"""

import argparse
import json
import math
import os
import shutil
import sys


def fail(msg):
    print(f"pad_gdn_heads: error: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--head-dim", type=int, default=128)
    a = ap.parse_args()
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    cpath = os.path.join(a.model, "config.json")
    if not os.path.isfile(cpath):
        fail(f"'{a.model}' has no config.json")
    cfg = json.load(open(cpath))
    tc = cfg.get("text_config", cfg)
    if tc.get("model_type", "").startswith("qwen3_next"):
        fail("Qwen3-Next's fused interleaved in_proj_qkvz is not padded by this tool (Qwen3.5 layouts only)")
    try:
        nk, nv = tc["linear_num_key_heads"], tc["linear_num_value_heads"]
        dk, dv = tc["linear_key_head_dim"], tc["linear_value_head_dim"]
    except KeyError as e:
        fail(f"{cpath}: no {e} (not a Gated DeltaNet model)")
    D = a.head_dim
    if D < max(dk, dv):
        fail(f"--head-dim {D} is below the model's GDN head dims ({dk}, {dv})")
    if os.path.exists(a.out) and os.listdir(a.out):
        fail(f"'{a.out}' exists and is not empty")
    files = sorted(f for f in os.listdir(a.model) if f.endswith(".safetensors"))
    if not files:
        fail(f"'{a.model}' has no .safetensors files")

    def pad_rows(w, heads, d):  # [heads*d, ...] -> [heads*D, ...], each head's rows padded with zeros
        out = torch.zeros((heads, D) + tuple(w.shape[1:]), dtype=w.dtype)
        out[:, :d] = w.reshape((heads, d) + tuple(w.shape[1:]))
        return out.reshape((heads * D,) + tuple(w.shape[1:]))

    def pad_qkv(w):
        q, k, v = torch.split(w, [nk * dk, nk * dk, nv * dv], dim=0)
        return torch.cat([pad_rows(q, nk, dk), pad_rows(k, nk, dk), pad_rows(v, nv, dv)], 0)

    os.makedirs(a.out, exist_ok=True)
    changed = 0
    for fn in files:
        tensors, meta = {}, None
        with safe_open(os.path.join(a.model, fn), framework="pt") as f:
            meta = f.metadata()
            for name in f.keys():
                w = f.get_tensor(name)
                if ".linear_attn." in name:
                    if name.endswith("in_proj_qkvz.weight"):
                        fail(f"{name}: a fused in_proj_qkvz (Qwen3-Next's layout) is not padded by this tool")
                    if name.endswith("in_proj_qkv.weight") or name.endswith("conv1d.weight"):
                        w = pad_qkv(w)
                        changed += 1
                    elif name.endswith("in_proj_z.weight"):
                        w = pad_rows(w, nv, dv)
                        changed += 1
                    elif name.endswith("out_proj.weight"):
                        w = pad_rows(w.t().contiguous(), nv, dv).t().contiguous()
                        changed += 1
                    elif name.endswith("norm.weight"):
                        scaled = (w.to(torch.float32) * math.sqrt(dv / D)).to(w.dtype)
                        w = torch.cat([scaled, torch.zeros(D - dv, dtype=w.dtype)])
                        changed += 1
                tensors[name] = w.contiguous()
        save_file(tensors, os.path.join(a.out, fn), metadata=meta)
    for fn in os.listdir(a.model):
        src = os.path.join(a.model, fn)
        if fn.endswith(".safetensors") or fn == "config.json" or not os.path.isfile(src):
            continue
        shutil.copy(src, os.path.join(a.out, fn))
    tc["linear_key_head_dim"] = D
    tc["linear_value_head_dim"] = D
    eps = tc.get("rms_norm_eps", 1e-6)
    tc["rms_norm_eps"] = eps * (dk / D) * (dv / D)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"pad_gdn_heads: wrote {a.out}: GDN head dims {dk}/{dv} -> {D}, {changed} tensors padded, "
          f"rms_norm_eps {eps:g} -> {tc['rms_norm_eps']:g}")


if __name__ == "__main__":
    main()
