#!/usr/bin/env python3
"""Build tiny random Qwen3.5 / Qwen3.5-MoE / Qwen3-Next checkpoints with Hugging Face
transformers and record HF's fp32 outputs on fixed token ids.

These are the independent reference fixtures for the C++ CPU reference engine
(issue 4, "Independent verification"). Everything here comes from transformers'
own config and model classes; nothing is re-implemented.

Usage:  python3 tools/make_hf_fixtures.py [--out tests/fixtures/hf] [--only NAME ...]

For every fixture NAME it writes tests/fixtures/hf/NAME/:
  config.json          from save_pretrained (generation_config.json is dropped)
  model.safetensors    the checkpoint (save_pretrained output, except where noted)
  reference.safetensors
    input_ids     [T]        I64  prompt, T = 70 (one full 64-token GDN chunk + 6)
    hidden.{i}    [T, H]     F32  i = 0: embedding output; i >= 1: output of decoder
                                  layer i-1 (residual stream after the layer), from
                                  forward hooks. hidden.{L} is NOT final-normed.
    final_norm    [T, H]     F32  output of the final RMSNorm (model.norm)
    logits        [T, V]     F32  lm_head output of the plain (use_cache=False) forward
    gen_ids       [N]        I64  greedy continuation, N = 8, with the HF cache
    gen_logits    [N, V]     F32  gen_logits[j] = the logits gen_ids[j] was chosen from:
                                  row 0 = prefill logits at position T-1; row j >= 1 =
                                  one-token cached decode of gen_ids[j-1] at position T+j-1
    gdn_state.{i} [n_v, d_k, d_v] F32  recurrent state of GDN layer i after the prompt
    conv_state.{i} [d_conv, K]    F32  HF conv cache of GDN layer i after the prompt:
                                  the last K pre-conv qkv columns (channel-major)

The references are computed from the checkpoint as written to disk, reloaded with
from_pretrained(dtype=float32, attn_implementation="eager"), in eval mode under
torch.no_grad(). The script is deterministic (fixed seeds, one thread); rerunning it
rewrites byte-identical files with the same torch / transformers versions.
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile

import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

import safetensors
import safetensors.torch
import transformers
from transformers import (
    DynamicCache,
    Qwen3_5Config,
    Qwen3_5ForCausalLM,
    Qwen3_5ForConditionalGeneration,
    Qwen3_5MoeForCausalLM,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
    Qwen3NextForCausalLM,
)
from transformers.models.qwen3_5 import modeling_qwen3_5
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe
from transformers.models.qwen3_next import modeling_qwen3_next

T_PROMPT = 70
N_GEN = 8
ROPE_THETA = 1e7

G, A = "linear_attention", "full_attention"


def rope(partial, mrope_section=None):
    r = {"rope_type": "default", "rope_theta": ROPE_THETA, "partial_rotary_factor": partial}
    if mrope_section is not None:
        r["mrope_section"] = mrope_section
        r["mrope_interleaved"] = True
    return r


# --------------------------------------------------------------------------------------
# Fixture definitions. `text` holds the LM config fields (flat for the text-only classes,
# nested as text_config for the VL class). `R` is the rotary dim we expect HF to use.
# --------------------------------------------------------------------------------------
FIXTURES = {
    "qwen35-dense": dict(
        seed=101,
        cls=Qwen3_5ForCausalLM,
        cfg_cls=Qwen3_5TextConfig,
        text=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=8,
            layer_types=[G, G, G, A, G, G, G, A],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
            intermediate_size=32, rope_parameters=rope(0.25, [2, 1, 1]),
            tie_word_embeddings=False,
        ),
        R=8,
    ),
    "qwen35-r3": dict(
        seed=102,
        cls=Qwen3_5ForCausalLM,
        cfg_cls=Qwen3_5TextConfig,
        text=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4,
            layer_types=[G, G, G, A],
            num_attention_heads=2, num_key_value_heads=1, head_dim=24,
            linear_num_key_heads=2, linear_num_value_heads=6,
            linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
            intermediate_size=32, rope_parameters=rope(0.25, [1, 1, 1]),
            tie_word_embeddings=True,
        ),
        R=6,
    ),
    "qwen35-moe": dict(
        seed=103,
        cls=Qwen3_5MoeForCausalLM,
        cfg_cls=Qwen3_5MoeTextConfig,
        text=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4,
            layer_types=[G, G, G, A],
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=8, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
            rope_parameters=rope(0.25, [1, 1, 0]),
            tie_word_embeddings=False,
        ),
        R=4,
        # The released Qwen3.5-35B-A3B checkpoint stores experts fused
        # (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I]);
        # HF's save_pretrained writes them per expert. We write the released layout
        # and check that HF loads it to the identical model.
        fuse_experts=True,
    ),
    "qwen3next": dict(
        seed=104,
        cls=Qwen3NextForCausalLM,
        cfg_cls=Qwen3NextConfig,
        text=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4,
            layer_types=[G, G, G, A],
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
            shared_expert_intermediate_size=32, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[1], intermediate_size=48,
            rope_parameters=rope(0.25),
            tie_word_embeddings=False,
        ),
        R=4,
    ),
    "qwen35-bf16": dict(
        seed=105,
        cls=Qwen3_5ForCausalLM,
        cfg_cls=Qwen3_5TextConfig,
        text=dict(
            vocab_size=512, hidden_size=64, num_hidden_layers=4,
            layer_types=[G, G, G, A],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=8, linear_conv_kernel_dim=4,
            intermediate_size=32, rope_parameters=rope(0.25, [2, 1, 1]),
            tie_word_embeddings=False,
        ),
        R=8,
        bf16=True,
    ),
    "qwen35-vl": dict(
        seed=106,
        cls=Qwen3_5ForConditionalGeneration,
        cfg_cls=Qwen3_5Config,
        text=dict(
            vocab_size=256, hidden_size=32, num_hidden_layers=4,
            layer_types=[G, G, G, A],
            num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
            intermediate_size=32, rope_parameters=rope(0.25, [2, 1, 1]),
        ),
        vision=dict(
            depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=2,
            temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=32,
            num_position_embeddings=16, in_channels=3,
        ),
        tie=False,
        R=8,
    ),
}

COMMON_TEXT = dict(rms_norm_eps=1e-6, hidden_act="silu", max_position_embeddings=4096)


def build_config(spec):
    text = dict(COMMON_TEXT, **spec["text"])
    if spec["cfg_cls"] is Qwen3_5Config:
        cfg = Qwen3_5Config(text_config=text, vision_config=spec["vision"],
                            tie_word_embeddings=spec["tie"])
    else:
        cfg = spec["cfg_cls"](**text)
    cfg._attn_implementation = "eager"
    return cfg


def text_config(cfg):
    return cfg.get_text_config(decoder=True)


# --------------------------------------------------------------------------------------
# Weights: overwrite every parameter with seeded values scaled like trained weights, so
# that the conventions (1+w norms vs plain gated norm, head layouts, ...) are observable.
# --------------------------------------------------------------------------------------
ZERO_CENTRED_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight",
                      "q_norm.weight", "k_norm.weight")


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    tc = text_config(model.config)
    K = tc.linear_conv_kernel_dim

    def randn(shape, std, mean=0.0):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean

    def uniform(shape, lo, hi):
        return torch.rand(shape, generator=g, dtype=torch.float32) * (hi - lo) + lo

    rules = {}
    n = 0
    for name, p in model.named_parameters():  # tied parameters are listed once
        shape = tuple(p.shape)
        if "visual" in name:  # vision tower: only needs to be deterministic
            if name.endswith(".bias"):
                v, rule = randn(shape, 0.02), "N(0,0.02)"
            elif p.ndim == 1:
                v, rule = randn(shape, 0.1, 1.0), "1+N(0,0.1)"
            else:
                fan_in = math.prod(shape[1:])
                v, rule = randn(shape, 1 / math.sqrt(fan_in)), "N(0,1/sqrt(fan_in))"
        elif name.endswith("embed_tokens.weight"):
            v, rule = randn(shape, 1.0), "N(0,1)"
        elif name.endswith("linear_attn.norm.weight"):
            v, rule = randn(shape, 0.1, 1.0), "1+N(0,0.1) (plain gated norm)"
        elif name.endswith(ZERO_CENTRED_NORMS) or name.endswith("model.norm.weight") \
                or name.endswith("language_model.norm.weight"):
            v, rule = randn(shape, 0.1), "N(0,0.1) (zero-centred)"
        elif name.endswith("linear_attn.A_log"):
            v, rule = torch.log(uniform(shape, 1.0, 16.0)), "log(U(1,16))"
        elif name.endswith("linear_attn.dt_bias"):
            # dt = softplus(dt_bias) log-uniform in [1e-3, 0.5] (Mamba-style init range)
            dt = torch.exp(uniform(shape, math.log(1e-3), math.log(0.5)))
            v, rule = torch.log(torch.expm1(dt)), "softplus^-1(logU(1e-3,0.5))"
        elif name.endswith("conv1d.weight"):
            v, rule = randn(shape, 1 / math.sqrt(K)), "N(0,1/sqrt(K))"
        elif name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            v, rule = randn(shape, 1 / math.sqrt(shape[-1])), "N(0,1/sqrt(fan_in))"
        elif p.ndim == 2:  # every nn.Linear (projections, router, shared-expert gate, lm_head)
            v, rule = randn(shape, 1 / math.sqrt(shape[1])), "N(0,1/sqrt(fan_in))"
        else:
            raise RuntimeError(f"no init rule for parameter {name} {shape}")
        with torch.no_grad():
            p.copy_(v)
        rules[name] = rule
        n += 1
    return rules


# --------------------------------------------------------------------------------------
# Checkpoint writing
# --------------------------------------------------------------------------------------
def write_checkpoint(spec, model, outdir):
    os.makedirs(outdir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        for f in sorted(os.listdir(tmp)):
            if f not in ("config.json", "model.safetensors", "generation_config.json"):
                raise RuntimeError(f"unexpected file from save_pretrained: {f}")
        shutil.copyfile(os.path.join(tmp, "config.json"), os.path.join(outdir, "config.json"))
        shutil.copyfile(os.path.join(tmp, "model.safetensors"), os.path.join(outdir, "model.safetensors"))
    path = os.path.join(outdir, "model.safetensors")

    if spec.get("fuse_experts"):
        sd = safetensors.torch.load_file(path)
        tc = text_config(model.config)
        out = {}
        for k, v in sd.items():
            if ".mlp.experts." in k:
                continue
            out[k] = v
        for i in range(tc.num_hidden_layers):
            pre = f"model.layers.{i}.mlp.experts"
            gate = [sd[f"{pre}.{e}.gate_proj.weight"] for e in range(tc.num_experts)]
            up = [sd[f"{pre}.{e}.up_proj.weight"] for e in range(tc.num_experts)]
            down = [sd[f"{pre}.{e}.down_proj.weight"] for e in range(tc.num_experts)]
            out[f"{pre}.gate_up_proj"] = torch.stack(
                [torch.cat([gt, u], dim=0) for gt, u in zip(gate, up)]).contiguous()
            out[f"{pre}.down_proj"] = torch.stack(down).contiguous()
        safetensors.torch.save_file(out, path, metadata={"format": "pt"})

    if spec.get("bf16"):
        sd = safetensors.torch.load_file(path)
        out = {}
        for k, v in sd.items():
            if k.endswith("linear_attn.A_log") or k.endswith("linear_attn.norm.weight"):
                out[k] = v.to(torch.float32).contiguous()
            else:
                out[k] = v.to(torch.bfloat16).contiguous()
        safetensors.torch.save_file(out, path, metadata={"format": "pt"})
        cfg_path = os.path.join(outdir, "config.json")
        with open(cfg_path) as f:
            cj = json.load(f)
        cj["dtype"] = "bfloat16"
        with open(cfg_path, "w") as f:
            json.dump(cj, f, indent=2, sort_keys=True)
            f.write("\n")


def round_to_bf16_in_place(model):
    """Round every parameter except A_log and the GDN gated-norm weight to bf16 (kept fp32)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear_attn.A_log") or name.endswith("linear_attn.norm.weight"):
                continue
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


# --------------------------------------------------------------------------------------
# Instrumentation: which GDN kernel runs, with which sequence length / initial state
# --------------------------------------------------------------------------------------
class KernelLog:
    def __init__(self):
        self.calls = []
        self._saved = []

    def __enter__(self):
        for mod in (modeling_qwen3_5, modeling_qwen3_5_moe, modeling_qwen3_next):
            for fname in ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule"):
                orig = getattr(mod, fname)
                self._saved.append((mod, fname, orig))

                def wrapped(*args, __orig=orig, __fname=fname, **kwargs):
                    q = args[0] if args else kwargs["query"]
                    self.calls.append((__fname, q.shape[1], kwargs.get("initial_state") is not None))
                    return __orig(*args, **kwargs)

                setattr(mod, fname, wrapped)
        return self

    def __exit__(self, *exc):
        for mod, fname, orig in self._saved:
            setattr(mod, fname, orig)


def lm_of(model):
    """The text decoder (has embed_tokens, layers, norm, rotary_emb)."""
    inner = model.model
    return inner.language_model if hasattr(inner, "language_model") else inner


# --------------------------------------------------------------------------------------
# Reference run
# --------------------------------------------------------------------------------------
def run_reference(spec, model, input_ids):
    tc = text_config(model.config)
    lm = lm_of(model)
    L = tc.num_hidden_layers
    ids = input_ids[None, :]
    refs = {"input_ids": input_ids.clone()}
    facts = {}

    # ---- plain forward with hooks --------------------------------------------------
    captured = {}

    def hook(key):
        def fn(_mod, _inp, out):
            t = out[0] if isinstance(out, tuple) else out
            captured[key] = t.detach()[0].clone()
        return fn

    # MoE routers: smallest gap between the k-th and (k+1)-th routing probability, so that a
    # near-tie in expert selection (which would make the fixture fragile) is visible.
    route_gaps = []

    def router_hook(mod, _inp, out):
        probs = torch.softmax(out[0].float(), dim=-1).sort(dim=-1, descending=True).values
        route_gaps.append(float((probs[:, mod.top_k - 1] - probs[:, mod.top_k]).min()))

    routers = [m for n, m in model.named_modules() if n.endswith("mlp.gate") and hasattr(m, "top_k")]
    router_handles = [m.register_forward_hook(router_hook) for m in routers]

    handles = [lm.embed_tokens.register_forward_hook(hook("hidden.0"))]
    for i, layer in enumerate(lm.layers):
        handles.append(layer.register_forward_hook(hook(f"hidden.{i + 1}")))
    handles.append(lm.norm.register_forward_hook(hook("final_norm")))
    with KernelLog() as klog:
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
    for h in handles:
        h.remove()
    n_gdn = sum(1 for t in tc.layer_types if t == G)
    assert klog.calls == [("torch_chunk_gated_delta_rule", T_PROMPT, False)] * n_gdn, klog.calls
    facts["prefill_kernel"] = sorted(set(klog.calls))

    for i in range(L + 1):
        refs[f"hidden.{i}"] = captured[f"hidden.{i}"]
    refs["final_norm"] = captured["final_norm"]
    refs["logits"] = out.logits[0].detach().clone()

    # final_norm -> logits consistency (lm_head or tied embedding)
    w_lm = model.lm_head.weight
    assert torch.allclose(refs["final_norm"] @ w_lm.T, refs["logits"], atol=1e-5, rtol=1e-5)

    # output_hidden_states semantics vs the hooks
    hs = out.hidden_states
    assert len(hs) == L + 1, len(hs)
    same = [torch.equal(hs[i][0], refs[f"hidden.{i}"]) for i in range(L + 1)]
    facts["output_hidden_states_equal_hooks"] = same
    facts["output_hidden_states_last_is_final_norm"] = torch.equal(hs[L][0], refs["final_norm"])

    # rotary dim actually used
    facts["rotary_dim"] = 2 * lm.rotary_emb.inv_freq.numel()
    assert facts["rotary_dim"] == spec["R"], (facts["rotary_dim"], spec["R"])

    # per-layer relative update size (are all layers observable?)
    facts["layer_update_rel"] = [
        float((refs[f"hidden.{i + 1}"] - refs[f"hidden.{i}"]).norm() / refs[f"hidden.{i}"].norm())
        for i in range(L)
    ]

    # ---- greedy decode with the cache: manual loop -----------------------------------
    cache = DynamicCache(config=model.config)
    with KernelLog() as klog:
        o = model(input_ids=ids, cache=cache, use_cache=True)
    assert klog.calls == [("torch_chunk_gated_delta_rule", T_PROMPT, False)] * n_gdn, klog.calls
    pre_logits = o.logits[0, -1].detach().clone()
    assert torch.allclose(o.logits[0], refs["logits"], atol=1e-6, rtol=1e-6)

    for i, t in enumerate(tc.layer_types):
        if t != G:
            continue
        conv = cache.get_conv_state(i)
        rec = cache.get_recurrent_state(i)
        assert conv.dtype == torch.float32 and rec.dtype == torch.float32
        refs[f"gdn_state.{i}"] = rec[0].detach().clone()
        refs[f"conv_state.{i}"] = conv[0].detach().clone()
        facts.setdefault("conv_state_shape", tuple(conv.shape))
        facts.setdefault("recurrent_state_shape", tuple(rec.shape))

    gen_ids, gen_logits = [], []
    step_logits = pre_logits
    decode_calls = []
    for j in range(N_GEN):
        gen_logits.append(step_logits)
        nxt = int(torch.argmax(step_logits))
        gen_ids.append(nxt)
        if j == N_GEN - 1:
            break
        with KernelLog() as klog:
            o = model(input_ids=torch.tensor([[nxt]]), cache=cache, use_cache=True)
        decode_calls += klog.calls
        step_logits = o.logits[0, -1].detach().clone()
    assert set(decode_calls) == {("torch_recurrent_gated_delta_rule", 1, True)}, decode_calls
    facts["decode_kernel"] = sorted(set(decode_calls))
    refs["gen_ids"] = torch.tensor(gen_ids, dtype=torch.int64)
    refs["gen_logits"] = torch.stack(gen_logits)

    # greedy margins (top1 - top2) so a near-tie is visible
    top2 = torch.topk(refs["gen_logits"], 2, dim=-1).values
    facts["min_greedy_margin"] = float((top2[:, 0] - top2[:, 1]).min())

    # ---- cross-check against model.generate ------------------------------------------
    # (attention_mask is passed explicitly: otherwise generate derives it from pad_token_id
    # and would treat prompt tokens equal to the pad id as padding.)
    gout = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=N_GEN, min_new_tokens=N_GEN,
        do_sample=False, use_cache=True, output_logits=True, return_dict_in_generate=True,
        pad_token_id=tc.vocab_size - 1,
    )
    g_ids = gout.sequences[0, T_PROMPT:]
    g_logits = torch.stack([x[0] for x in gout.logits])
    assert torch.equal(g_ids, refs["gen_ids"]), (g_ids, refs["gen_ids"])
    facts["generate_max_abs_diff"] = float((g_logits - refs["gen_logits"]).abs().max())
    assert facts["generate_max_abs_diff"] < 1e-5

    # ---- recompute the continuation without cache (full forward over T+N-1 tokens) ---
    full = torch.cat([input_ids, refs["gen_ids"][:-1]])[None, :]
    fl = model(input_ids=full, use_cache=False).logits[0, T_PROMPT - 1:]
    d = (fl - refs["gen_logits"]).norm() / refs["gen_logits"].norm()
    facts["cached_vs_uncached_rel_l2"] = float(d)
    assert d < 1e-5, d
    for h in router_handles:
        h.remove()
    if routers:
        facts["min_routing_gap"] = min(route_gaps)
    return refs, facts


def make_fixture(name, spec, outroot):
    outdir = os.path.join(outroot, name)
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    torch.manual_seed(spec["seed"])
    cfg = build_config(spec)
    model = spec["cls"](cfg).eval()
    rules = init_weights(model, spec["seed"])
    if spec.get("bf16"):
        round_to_bf16_in_place(model)
    write_checkpoint(spec, model, outdir)

    # Reload what is on disk, in fp32, and check it is exactly the model we built.
    loaded, info = spec["cls"].from_pretrained(
        outdir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    loaded.eval()
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(k), (name, k, info.get(k))
    sd_a, sd_b = model.state_dict(), loaded.state_dict()
    assert sd_a.keys() == sd_b.keys()
    for k in sd_a:
        assert torch.equal(sd_a[k], sd_b[k]), (name, k)
    assert loaded.config._attn_implementation == "eager"

    g = torch.Generator().manual_seed(spec["seed"] + 1000)
    vocab = text_config(cfg).vocab_size
    input_ids = torch.randint(0, vocab, (T_PROMPT,), generator=g, dtype=torch.int64)
    with torch.no_grad():
        refs, facts = run_reference(spec, loaded, input_ids)

    refs = {k: v.contiguous() for k, v in refs.items()}
    # A single metadata key: safetensors writes a multi-key metadata map in random order,
    # which would make the file bytes differ from run to run.
    meta = {"source": f"tools/make_hf_fixtures.py (transformers {transformers.__version__}, "
                      f"torch {torch.__version__.split('+')[0]}, safetensors {safetensors.__version__}); "
                      f"T={T_PROMPT} N={N_GEN}"}
    safetensors.torch.save_file(refs, os.path.join(outdir, "reference.safetensors"), metadata=meta)

    with safetensors.safe_open(os.path.join(outdir, "model.safetensors"), "pt") as f:
        dtypes = sorted({f.get_slice(k).get_dtype() for k in f.keys()})
        ntensors = len(list(f.keys()))
    facts["checkpoint_dtypes"] = dtypes
    facts["checkpoint_tensors"] = ntensors
    facts["init_rules"] = sorted(set(rules.values()))
    return facts


# --------------------------------------------------------------------------------------
# The shipped trained model (models/tiny-trained): HF loads the checkpoint as released and
# computes the same references on real text; plus the chat template and tokenizer on a few
# conversations. The checkpoint is not copied: the test reads it from models/.
# --------------------------------------------------------------------------------------
TRAINED_TEXT = ("Here are some facts to remember.\nMira lives in Oslo.\nThe code of Tom is 4821.\n\n"
                "Once upon a time, in the quiet town of Bergen, there lived a baker named Ida. Ida had a grey cat "
                "named Otto and an old lamp. In the morning, Ida walked to the busy market with Otto. \"Look at the "
                "sky,\" said Ida. Otto the cat ran after a duck across the river.\n\nQ: Where does Mira live?\nA:")

CHATS = [
    dict(messages=[{"role": "user", "content": "What is 2+2?"}], enable_thinking=True),
    dict(messages=[{"role": "user", "content": "  Count from 5 to 9.  "}], enable_thinking=False),
    dict(messages=[{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": "Name three colors."}], enable_thinking=True),
    dict(messages=[{"role": "user", "content": "Tell me a short story about a café owner in Malmö."}],
         enable_thinking=False),
]


def make_trained_fixture(model_dir, outdir):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    os.makedirs(outdir, exist_ok=True)
    model, info = Qwen3_5ForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    model.eval()
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(k), (k, info.get(k))
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    ids = tok.encode(TRAINED_TEXT, add_special_tokens=False).ids
    assert len(ids) >= T_PROMPT, len(ids)
    input_ids = torch.tensor(ids[:T_PROMPT], dtype=torch.int64)
    tc = text_config(model.config)
    spec = {"R": int(tc.head_dim * tc.rope_parameters["partial_rotary_factor"])}
    with torch.no_grad():
        refs, facts = run_reference(spec, model, input_ids)
    refs = {k: v.contiguous() for k, v in refs.items()}
    meta = {"source": f"tools/make_hf_fixtures.py --trained (transformers {transformers.__version__}, "
                      f"torch {torch.__version__.split('+')[0]}, safetensors {safetensors.__version__}); "
                      f"model {model_dir}; T={T_PROMPT} N={N_GEN}"}
    safetensors.torch.save_file(refs, os.path.join(outdir, "reference.safetensors"), metadata=meta)
    # chat template (tokenizer_config.json) and tokenizer, as HF applies them
    at = AutoTokenizer.from_pretrained(model_dir)
    chats = []
    for c in CHATS:
        text = at.apply_chat_template(c["messages"], tokenize=False, add_generation_prompt=True,
                                      enable_thinking=c["enable_thinking"])
        chats.append({"messages": c["messages"], "enable_thinking": c["enable_thinking"], "text": text,
                      "ids": tok.encode(text, add_special_tokens=False).ids})
    with open(os.path.join(outdir, "chat.json"), "w") as f:
        json.dump({"source": meta["source"], "chats": chats}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    facts["prompt"] = TRAINED_TEXT[:60] + "..."
    return facts


# --------------------------------------------------------------------------------------
# Two normalisations (issue 20.8, docs/metrics.md): a checkpoint whose tokenizer is smaller than
# vocab_size (tiny-qwen35, synthesised: 1000 ids, 1024 LM-head rows). HF's log_softmax runs over all
# vocab_size rows, the golden record's over the tokenizer's ids; the record's lse_pad converts one
# into the other. The checkpoint is not copied: the test synthesises it and checks its SHA-256.
# --------------------------------------------------------------------------------------
VOCAB_GAP_TEXT = "What is 2+2? The answer is 4. Count from 5 to 9: 5 6 7 8 9."


def make_vocab_gap_fixture(model_dir, outdir):
    import hashlib
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        model_sha = hashlib.sha256(f.read()).hexdigest()
    cfg = AutoConfig.from_pretrained(model_dir)
    cls = Qwen3_5ForConditionalGeneration if cfg.model_type == "qwen3_5" else AutoModelForCausalLM
    model, info = cls.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    model.eval()
    # The synthesised checkpoint is text-only under a VL config (no vision tower, which the text
    # logits do not use); HF ignores mtp.* (as for the trained model).
    assert not info.get("mismatched_keys"), info.get("mismatched_keys")
    assert all(k.startswith("model.visual.") for k in info.get("missing_keys", [])), info.get("missing_keys")
    assert all(k.startswith("mtp.") for k in info.get("unexpected_keys", [])), info.get("unexpected_keys")
    V = text_config(model.config).vocab_size
    # The real ids as HF's tokenizer counts them (base vocabulary and added tokens): len(tokenizer).
    n_real = len(AutoTokenizer.from_pretrained(model_dir))
    assert n_real < V, (n_real, V)
    ids = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json")).encode(
        VOCAB_GAP_TEXT, add_special_tokens=False).ids
    input_ids = torch.tensor(ids, dtype=torch.int64)
    with torch.no_grad():
        logits = model(input_ids=input_ids[None, :], use_cache=False).logits[0].float()  # [T, V]
    lp = torch.log_softmax(logits.double(), dim=-1)                     # HF's normalisation: all V rows
    lse_vocab = torch.logsumexp(logits.double(), dim=-1)
    lse_real = torch.logsumexp(logits.double()[:, :n_real], dim=-1)     # the tokenizer's ids
    refs = {"input_ids": input_ids,
            "logprobs": lp.float().contiguous(),                        # [T, V] log_softmax over all rows
            "lse_vocab": lse_vocab.contiguous(),                        # [T] F64
            "lse_pad": (lse_vocab - lse_real).contiguous()}             # [T] F64
    meta = {"source": f"tools/make_hf_fixtures.py --vocab-gap (transformers {transformers.__version__}, "
                      f"torch {torch.__version__.split('+')[0]}, safetensors {safetensors.__version__}); "
                      f"model {os.path.basename(os.path.normpath(model_dir))} model.safetensors sha256 {model_sha}; "
                      f"V={V} real ids={n_real} T={len(ids)}"}
    safetensors.torch.save_file(refs, os.path.join(outdir, "reference.safetensors"), metadata=meta)
    return {"V": V, "real ids": n_real, "T": len(ids), "model sha256": model_sha,
            "lse_pad mean": float((lse_vocab - lse_real).mean()),
            "lse_pad min/max": (float((lse_vocab - lse_real).min()), float((lse_vocab - lse_real).max()))}


def environment_checks():
    import importlib.util
    env = {m: importlib.util.find_spec(m) is not None
           for m in ("fla", "causal_conv1d", "kernels", "flash_attn")}
    # With fla / causal_conv1d absent, HF binds its pure-torch fallbacks.
    assert not env["fla"] and not env["causal_conv1d"], env
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", "tests", "fixtures", "hf"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--trained", metavar="MODEL_DIR", help="only the fixture of the shipped trained model "
                    "(e.g. models/tiny-trained) into OUT/../hf-trained")
    ap.add_argument("--vocab-gap", metavar="MODEL_DIR", help="only the two-normalisations fixture of a checkpoint whose "
                    "tokenizer is smaller than vocab_size (build/degenbisect synth --preset tiny-qwen35 --out MODEL_DIR) "
                    "into OUT/../hf-vocab-gap")
    args = ap.parse_args()
    outroot = os.path.normpath(args.out)
    os.makedirs(outroot, exist_ok=True)

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"safetensors {safetensors.__version__}")
    print("optional kernels importable:", environment_checks())
    if args.vocab_gap:
        out = os.path.join(os.path.dirname(outroot), "hf-vocab-gap")
        facts = make_vocab_gap_fixture(args.vocab_gap, out)
        print(f"\n== hf-vocab-gap ({args.vocab_gap}) -> {out}")
        for k, v in facts.items():
            print(f"   {k}: {v}")
        return 0
    if args.trained:
        out = os.path.join(os.path.dirname(outroot), "hf-trained")
        facts = make_trained_fixture(args.trained, out)
        print(f"\n== hf-trained ({args.trained}) -> {out}")
        for k, v in facts.items():
            print(f"   {k}: {v}")
        return 0
    for name, spec in FIXTURES.items():
        if args.only and name not in args.only:
            continue
        facts = make_fixture(name, spec, outroot)
        size = sum(os.path.getsize(os.path.join(outroot, name, f))
                   for f in os.listdir(os.path.join(outroot, name)))
        print(f"\n== {name}: {size / 1024:.0f} KiB")
        if not args.quiet:
            for k, v in facts.items():
                print(f"   {k}: {v}")


if __name__ == "__main__":
    sys.exit(main())
