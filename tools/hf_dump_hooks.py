#!/usr/bin/env python3
"""Write a degenbisect dump (docs/dump-format.md) from a PyTorch model's forward hooks.

Usage:
  python3 tools/hf_dump_hooks.py --model DIR --golden GOLDEN_DIR --out OUT_DIR
                                 [--case ID ...] [--dtype float32|bfloat16] [--perturb PARAM[=FACTOR]]

For every case of the golden record (GOLDEN_DIR/manifest.json; or only the --case ids) it runs the
sequence prompt + continuation as ONE teacher-forced forward pass (positions 0..T-1, batch 1, no
cache) through the Hugging Face transformers model in DIR (eval mode, CPU), and writes
OUT_DIR/<case id>.safetensors with every captured step as F32 [T, cols] (position outermost, the
rest flattened in the module's own order), `logits` F32 [T, V], and the metadata
{"format": "degenbisect-dump", "names": "degenbisect", "case", "tokens", "engine"}. Judge it with

  degenbisect compare --golden GOLDEN_DIR --model DIR --dump OUT_DIR --engine-class fp32   (bf16: bf16)

Step mapping (our names of src/engine/trace.h; HF Qwen3.5 module paths relative to decoder layer L).
Only steps whose semantics, shape and head order equal ours are written; all are module outputs or
module inputs, never recomputed:

  embed          embed_tokens output                      token embeddings = the input of layer 0
  attn_norm-L    input_layernorm output                   [T, H]
  attn_gate-L    self_attn.q_proj output, viewed          q_proj emits per head [q(D) | gate(D)]
                 [T, n_q, 2D], the second half of each    (HF: torch.chunk(view(..., -1, 2D), 2));
                 head -> [T, n_q*D]                       the gate LOGITS, before the sigmoid
  attn_v-L       self_attn.v_proj output [T, n_kv*D]      V has no norm and no RoPE
  attn_gated-L   self_attn.o_proj INPUT [T, n_q*D]        softmax(qk)v * sigmoid(gate)
  gdn_qkv-L      linear_attn.in_proj_qkv output           pre-conv q|k|v, split layout, [T, 2*n_k*d_k + n_v*d_v]
  gdn_z-L        linear_attn.in_proj_z output             [T, n_v*d_v]
  gdn_b-L        linear_attn.in_proj_b output             beta logits (before the sigmoid) [T, n_v]
  gdn_a-L        linear_attn.in_proj_a output             decay logits (before softplus) [T, n_v]
  gdn_core-L     linear_attn.norm INPUT 0                 delta-rule output o, [B*T*n_v, d_v] ->
                                                          [T, n_v*d_v] (HF reshapes [B,T,n_v,d_v])
  gdn_norm-L     linear_attn.out_proj INPUT               gated RMSNorm output [T, n_v*d_v]
  mixer_out-L    self_attn.o_proj / linear_attn.out_proj output   [T, H]
  h_mid-L        post_attention_layernorm INPUT           residual after the mixer [T, H]
  ffn_norm-L     post_attention_layernorm output          [T, H]
  ffn_out-L      mlp output                               [T, H] (dense MLP or the MoE block's sum)
  l_out-L        decoder layer output                     residual stream after the layer [T, H]
  final_norm     norm output (the text model's final RMSNorm)
  logits         the model's logits [T, V]

Head order: the GDN value heads stay in the checkpoint's grouped order, which is ours (HF does not
reorder them the way llama.cpp's converter does). Not written, because no module boundary gives
them exactly: attn_q / attn_k (after RoPE; q_norm/k_norm outputs are before it), attn_core (the
attention kernel is a function), gdn_conv (causal_conv1d_fn is a function), gdn_q / gdn_k / gdn_g /
gdn_beta (computed inline), the MTP head (transformers does not run it), the MoE router and experts.

Library use (another PyTorch engine: SGLang, vLLM): build a collector with
  col = attach(model, layer_modules, embed=..., final_norm=..., specs=...)
run one forward over the T tokens of ONE sequence (eager, no CUDA graph, no batching with other
requests), then col.tensors(T) -> {name: F32 CPU tensor [T, cols]}, col.remove() to detach.
`specs` is a list of Spec(step, path, where, pick): `path` a dotted submodule path relative to
each layer module ("" = the layer itself), `where` "out" (forward hook) or "in" (forward pre-hook),
`pick` an optional function of the output (or of (args, kwargs) for "in") returning the tensor.
A path a layer lacks is skipped for that layer (GDN vs attention layers). Engines whose layers fuse
the residual add into the norms (vLLM/SGLang: norm(x, residual) -> (normed, residual), layer
returns (h, residual)) need their own specs: l_out there is the sum of the layer's two outputs.
write_dump(path, tensors, logits, case, engine) writes the file.

Test aid: --perturb PARAM[=FACTOR] scales the model parameter PARAM (its full name from
named_parameters(), or a unique suffix of it, e.g. layers.5.mlp.down_proj.weight) in place by
FACTOR (default 1.01) before running, so a planted bug can be found by compare
(tests/cli/hf_dump.sh).
"""

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Callable, Optional


class UserError(Exception):
    pass


# ------------------------------------------------------------------------------------------------
# Hooks (engine-independent)
# ------------------------------------------------------------------------------------------------

def _first(x):
    """The tensor of a module output: the output itself or the first element of a tuple."""
    while isinstance(x, (tuple, list)):
        x = x[0]
    return x


def _arg0(args, kwargs):
    """The first input of a module call (positional, or the hidden_states keyword)."""
    if args:
        return args[0]
    if "hidden_states" in kwargs:
        return kwargs["hidden_states"]
    return next(iter(kwargs.values()))


@dataclass
class Spec:
    step: str                       # our step name (engine/trace.h), without -L
    path: str                       # submodule path relative to the layer ("" = the layer)
    where: str = "out"              # "out": forward hook on the output; "in": pre-hook on the input
    pick: Optional[Callable] = None  # out: f(output) -> tensor; in: f(args, kwargs) -> tensor


class Collector:
    """Tensors captured by the hooks of attach(), by name (e.g. "l_out-3")."""

    def __init__(self):
        self._raw = {}
        self.handles = []
        self.repeated = set()

    def put(self, name, t):
        import torch
        if name in self._raw:
            self.repeated.add(name)  # a module called twice in one forward: the last value is kept
        self._raw[name] = t.detach().to("cpu", dtype=torch.float32).clone()

    def clear(self):
        self._raw.clear()
        self.repeated.clear()

    def tensors(self, T):
        """{name: F32 [T, cols]}: every captured tensor with the position outermost (batch 1)."""
        out = {}
        for name, t in self._raw.items():
            if t.numel() % T:
                raise UserError(f"captured '{name}' of shape {list(t.shape)} is not {T} rows")
            out[name] = t.reshape(T, -1).contiguous()
        return out

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles.clear()


def _submodule(mod, path):
    for part in path.split(".") if path else []:
        if not hasattr(mod, part):
            return None
        mod = getattr(mod, part)
    return mod


def _hook(col, name, where, pick):
    if where == "out":
        def fn(_m, _args, out):
            col.put(name, pick(out) if pick else _first(out))
        return fn

    def pre(_m, args, kwargs):
        col.put(name, pick(args, kwargs) if pick else _arg0(args, kwargs))
    return pre


def attach(model, layer_modules, specs=None, embed=None, final_norm=None):
    """Register the hooks; returns a Collector. layer_modules[L] is decoder layer L; each Spec is
    applied to every layer that has its submodule (specs=None: hf_qwen35_specs with the head_dim of
    model.config's text config); `embed` / `final_norm` are whole-model modules whose outputs are
    the steps `embed` / `final_norm`."""
    if specs is None:
        specs = hf_qwen35_specs(model.config.get_text_config(decoder=True).head_dim)
    col = Collector()
    for L, layer in enumerate(layer_modules):
        for s in specs:
            m = _submodule(layer, s.path)
            if m is None:
                continue
            name = f"{s.step}-{L}"
            if s.where == "out":
                col.handles.append(m.register_forward_hook(_hook(col, name, "out", s.pick)))
            elif s.where == "in":
                col.handles.append(m.register_forward_pre_hook(_hook(col, name, "in", s.pick), with_kwargs=True))
            else:
                raise ValueError(f"Spec.where must be 'out' or 'in', not {s.where!r}")
    for name, m in (("embed", embed), ("final_norm", final_norm)):
        if m is not None:
            col.handles.append(m.register_forward_hook(_hook(col, name, "out", None)))
    return col


def hf_qwen35_specs(head_dim):
    """The Spec table of HF transformers' Qwen3.5 / Qwen3.5-MoE decoder layers (module docstring)."""
    def gate(out):
        t = _first(out)
        t = t.reshape(*t.shape[:-1], -1, 2 * head_dim)[..., head_dim:]
        return t.reshape(*t.shape[:-2], -1)

    return [
        Spec("attn_norm", "input_layernorm"),
        Spec("attn_gate", "self_attn.q_proj", pick=gate),
        Spec("attn_v", "self_attn.v_proj"),
        Spec("attn_gated", "self_attn.o_proj", "in"),
        Spec("gdn_qkv", "linear_attn.in_proj_qkv"),
        Spec("gdn_z", "linear_attn.in_proj_z"),
        Spec("gdn_b", "linear_attn.in_proj_b"),
        Spec("gdn_a", "linear_attn.in_proj_a"),
        Spec("gdn_core", "linear_attn.norm", "in"),
        Spec("gdn_norm", "linear_attn.out_proj", "in"),
        Spec("mixer_out", "self_attn.o_proj"),
        Spec("mixer_out", "linear_attn.out_proj"),
        Spec("h_mid", "post_attention_layernorm", "in"),
        Spec("ffn_norm", "post_attention_layernorm"),
        Spec("ffn_out", "mlp"),
        Spec("l_out", ""),
    ]


def write_dump(path, tensors, logits, case, engine, extra_meta=None):
    """One dump file: tensors {name: [T, ...]} and logits [T, V], all written as F32."""
    import torch
    from safetensors.torch import save_file
    T = int(logits.shape[0])
    data = {k: v.to(torch.float32).contiguous() for k, v in tensors.items()}
    data["logits"] = logits.to(torch.float32).reshape(T, -1).contiguous()
    meta = {"format": "degenbisect-dump", "names": "degenbisect", "case": case, "tokens": str(T),
            "engine": engine}
    meta.update(extra_meta or {})
    save_file(data, path, metadata=meta)


# ------------------------------------------------------------------------------------------------
# The transformers driver
# ------------------------------------------------------------------------------------------------

def read_record(golden, case_ids):
    """[(case id, prompt + continuation ids)] of the record's cases (all, or `case_ids`)."""
    return [(cid, seq) for cid, seq, _ in read_record_prompts(golden, case_ids)]


def read_record_prompts(golden, case_ids):
    """[(case id, prompt + continuation ids, number of prompt ids)]."""
    from safetensors import safe_open
    mpath = os.path.join(golden, "manifest.json")
    if not os.path.isdir(golden):
        raise UserError(f"golden record '{golden}' is not a directory")
    if not os.path.isfile(mpath):
        raise UserError(f"golden record '{golden}' has no manifest.json")
    try:
        with open(mpath) as f:
            cases = json.load(f)["cases"]
        by_id = {c["id"]: c for c in cases}
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{mpath}: not a golden manifest ({e})")
    ids = case_ids or list(by_id)
    for cid in ids:
        if cid not in by_id:
            raise UserError(f"case '{cid}' is not in {mpath} (cases: {', '.join(by_id)})")
    out = []
    for cid in ids:
        p = os.path.join(golden, by_id[cid]["file"])
        try:
            with safe_open(p, framework="pt") as f:
                seq = [int(x) for x in f.get_tensor("prompt").reshape(-1)]
                n_prompt = len(seq)
                seq += [int(x) for x in f.get_tensor("continuation").reshape(-1)]
        except Exception as e:  # missing file, not safetensors, no prompt/continuation
            raise UserError(f"case '{cid}': cannot read {p}: {e}")
        out.append((cid, seq, n_prompt))
    return out


def _line(e):
    """An exception's first line (transformers' messages run on with advice)."""
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def load_model(model_dir, dtype):
    import torch
    import transformers
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise UserError(f"model '{model_dir}' has no config.json")
    try:
        cfg = transformers.AutoConfig.from_pretrained(model_dir)
    except Exception as e:
        raise UserError(f"transformers cannot read the config of '{model_dir}': {_line(e)}")
    # The checkpoint's own class first (qwen3_5 ships as Qwen3_5ForConditionalGeneration with a nested
    # text_config), then AutoModelForCausalLM; the first that loads without missing weights wins.
    classes = [getattr(transformers, a) for a in (cfg.architectures or []) if hasattr(transformers, a)]
    classes.append(transformers.AutoModelForCausalLM)
    errors = []
    for cls in classes:
        try:
            model, info = cls.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager",
                                              output_loading_info=True)
        except Exception as e:
            errors.append(f"{getattr(cls, '__name__', cls)}: {_line(e)}")
            continue
        if info.get("missing_keys") or info.get("mismatched_keys"):
            errors.append(f"{cls.__name__}: missing/mismatched weights "
                          f"{sorted(info.get('missing_keys') or info.get('mismatched_keys'))[:3]}")
            continue
        return model.eval()
    raise UserError(f"transformers cannot load '{model_dir}': " + "; ".join(errors))


def find_text_model(model):
    """The module holding embed_tokens, layers and norm (the decoder stack)."""
    for _, m in model.named_modules():
        if all(hasattr(m, a) for a in ("embed_tokens", "layers", "norm")):
            return m
    raise UserError(f"{type(model).__name__}: no submodule with embed_tokens, layers and norm")


def named_factor(spec, names, option, kind):
    """A test aid's NAME[=FACTOR] (FACTOR default 1.01): the one name of `names` equal to NAME or
    ending in ".NAME", and the factor; anything else is a UserError naming `option`."""
    name, _, factor = spec.partition("=")
    try:
        factor = float(factor) if factor else 1.01
    except ValueError:
        raise UserError(f"{option} {spec}: the factor is not a number")
    hits = [n for n in names if n and (n == name or n.endswith("." + name))]
    if len(hits) != 1:
        raise UserError(f"{option} {spec}: {'no' if not hits else len(hits)} {kind} match '{name}'"
                        + (f" ({', '.join(hits[:4])})" if hits else ""))
    return hits[0], factor


def perturb(model, spec):
    import torch
    params = dict(model.named_parameters())
    name, factor = named_factor(spec, params, "--perturb", "parameters")
    with torch.no_grad():
        params[name].mul_(factor)
    return name, factor


def add_dump_args(ap):
    """The arguments every dump writer takes (this tool and tools/vllm_dump.py)."""
    ap.add_argument("--model", required=True)
    ap.add_argument("--golden", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dump_args(ap)
    ap.add_argument("--perturb", metavar="PARAM[=FACTOR]", help="test aid: scale one parameter in place")
    a = ap.parse_args(argv)
    try:
        cases = read_record(a.golden, a.case)   # before importing torch: bad input fails fast
        import torch
        import transformers
        if a.threads:
            torch.set_num_threads(a.threads)
        model = load_model(a.model, getattr(torch, a.dtype))
        note = {}
        if a.perturb:
            pname, factor = perturb(model, a.perturb)
            note["perturbed"] = f"{pname} x {factor}"
            print(f"hf_dump_hooks: TEST AID: {pname} scaled by {factor}", file=sys.stderr)
        text = find_text_model(model)
        tc = model.config.get_text_config(decoder=True)
        n_layers = tc.num_hidden_layers
        col = attach(model, list(text.layers)[:n_layers], embed=text.embed_tokens, final_norm=text.norm)
        os.makedirs(a.out, exist_ok=True)
        engine = f"transformers {transformers.__version__}"
        for cid, seq in cases:
            col.clear()
            T = len(seq)
            ids = torch.tensor([seq], dtype=torch.long)
            with torch.no_grad():
                logits = model(input_ids=ids, use_cache=False).logits[0]
            tensors = col.tensors(T)
            missing = [f"l_out-{L}" for L in range(n_layers) if f"l_out-{L}" not in tensors]
            if missing:
                raise UserError(f"case '{cid}': no {', '.join(missing)} captured")
            meta = dict(note, dtype=a.dtype)
            if col.repeated:
                meta["repeated_names"] = ",".join(sorted(col.repeated))
            path = os.path.join(a.out, f"{cid}.safetensors")
            write_dump(path, tensors, logits, cid, engine, meta)
            print(f"hf_dump_hooks: {path}: T={T}, {len(tensors)} steps + logits [{T}, {logits.shape[-1]}]")
        col.remove()
    except UserError as e:
        print(f"hf_dump_hooks: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
