#!/usr/bin/env python3
"""Trains the shipped tiny hybrid model (models/tiny-trained) from scratch on this machine's CPUs.

A Qwen3.6-27B in miniature (issue 17): model_type qwen3_5 with a nested text_config, 8 layers
GGGA GGGA (three Gated DeltaNet layers then one gated full-attention layer, twice), n_v / n_k = 3,
attention head_dim 64 != hidden / heads = 48, partial rotary 0.25, sigmoid output gate, untied
embeddings, one MTP layer trained jointly (spec model.md §6: shared embedding and LM head,
[norm(emb(x_{t+1})); norm(h_t)] -> fc -> one full-attention decoder layer -> norm -> lm_head
predicts x_{t+2}), all weights bf16 as the 27B stores them (A_log and the GDN norm included).

The forward pass used for training is this file's own (PyTorch, fp32): the chunked gated delta
rule of spec §4.7.6 with every chunk's intra-chunk part computed at once and one triangular solve,
SDPA attention. `check-hf` loads the exported checkpoint with Hugging Face transformers and checks
that HF's forward pass gives the same logits as this one on the same weights (so the weights mean
in HF, and therefore in degenbisect, what they meant in training).

Never run by make. Steps (each resumable, all outputs under --work, default out/tiny-trained):
  python3 tools/train_tiny_hybrid.py data       # both stages' corpora (tools/tiny_corpus.py), tokenizer, token ids
  python3 tools/train_tiny_hybrid.py train      # stage 1 then stage 2 (STAGES); resumes from WORK/ckpt*.pt
  python3 tools/train_tiny_hybrid.py export --out models/tiny-trained
  python3 tools/train_tiny_hybrid.py check-hf --model models/tiny-trained
  python3 tools/train_tiny_hybrid.py speed      # tokens/s of this forward+backward vs HF's
  python3 tools/train_tiny_hybrid.py all        # data, train, export, check-hf

Requirements: torch, transformers (>= 5, for Qwen3_5), tokenizers, safetensors, numpy. Single process,
torch.set_num_threads(--threads). The seed fixes the corpus, the initial weights and every batch;
resuming reproduces the run that was not interrupted (same batches, same optimizer state).
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_corpus  # noqa: E402

# ---------------------------------------------------------------------------------------------
# The model's shape. Changing any of these is a different model (new fingerprint, new goldens).
CONFIG = dict(
    vocab_size=2048,            # padded: the tokenizer defines TOKENIZER_VOCAB + 5 special ids below it
    hidden_size=192,
    num_hidden_layers=8,
    layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
    full_attention_interval=4,
    num_attention_heads=4,      # n_q
    num_key_value_heads=2,      # n_kv
    head_dim=64,                # D != hidden / n_q = 48, as in the real checkpoints (256 != 5120/24)
    linear_num_key_heads=2,     # n_k
    linear_num_value_heads=6,   # n_v: r = 3 as in Qwen3.6-27B
    linear_key_head_dim=32,
    linear_value_head_dim=32,
    linear_conv_kernel_dim=4,
    intermediate_size=512,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25,
                     "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    attn_output_gate=True,
    output_gate_type="swish",
    mamba_ssm_dtype="float32",
    mtp_num_hidden_layers=1,
    mtp_use_dedicated_embeddings=False,
    tie_word_embeddings=False,
)
TOKENIZER_VOCAB = 2000          # BPE tokens (256 bytes + merges); the 5 specials follow them
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHUNK = 64                      # GDN chunk (spec §4.7.6)

# Training schedule: (sequence length, share of the token budget). The sequence-length curriculum
# spends the first steps on short sequences (cheap, most of the grammar) and ends on long ones
# (the recurrent state across several chunks, the 512+ token generations of the long-decode suite).
CURRICULUM = [(128, 0.15), (256, 0.25), (512, 0.35), (1024, 0.25)]
TRAIN = dict(wd=0.1, mtp_weight=0.5, ckpt_every=50, eval_every=200)
# Two stages. Stage 1 learns the language from scratch on the main mix. Stage 2 continues from
# stage 1's last weights and optimizer state with a fresh warm-up and cosine, on a mix weighted
# towards facts recalled after a story and arithmetic (tiny_corpus.STAGE2_*), which stage 1 had not
# learnt when it ended (the README's "The shipped model" has the curves and figures).
STAGES = {
    1: dict(mix="stage1", seed=1, corpus_tokens=12_000_000, tokens=8_000_000, tokens_per_step=4096,
            curriculum=CURRICULUM, lr=3e-3, min_lr=2e-4, warmup=60, files=("ids.npy", "starts.npy", "ckpt.pt")),
    2: dict(mix="stage2", seed=2, corpus_tokens=6_000_000, tokens=4_000_000, tokens_per_step=4096,
            curriculum=[(1024, 1.0)], lr=1.5e-3, min_lr=1e-4, warmup=40, files=("ids2.npy", "starts2.npy", "ckpt2.pt")),
}


def check_config(c=CONFIG):
    """Refuses a model config this trainer (and the Qwen3.5 layout) cannot use, naming the field."""
    def need(cond, msg):
        if not cond:
            sys.exit(f"config: {msg}")
    for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
              "linear_value_head_dim", "linear_conv_kernel_dim", "intermediate_size"):
        need(isinstance(c.get(k), int) and c[k] > 0, f"{k} must be a positive integer, found {c.get(k)!r}")
    need(len(c["layer_types"]) == c["num_hidden_layers"],
         f"layer_types has {len(c['layer_types'])} entries, expected num_hidden_layers = {c['num_hidden_layers']}")
    need(set(c["layer_types"]) <= {"linear_attention", "full_attention"},
         f"layer_types may hold linear_attention and full_attention only, found {sorted(set(c['layer_types']))}")
    need(c["linear_num_value_heads"] % c["linear_num_key_heads"] == 0,
         f"linear_num_value_heads ({c['linear_num_value_heads']}) must be a multiple of linear_num_key_heads "
         f"({c['linear_num_key_heads']})")
    need(c["num_attention_heads"] % c["num_key_value_heads"] == 0,
         f"num_attention_heads ({c['num_attention_heads']}) must be a multiple of num_key_value_heads "
         f"({c['num_key_value_heads']})")
    R = int(c["head_dim"] * c["rope_parameters"]["partial_rotary_factor"])
    need(R > 0 and R % 2 == 0, f"head_dim x partial_rotary_factor = {R} must be a positive even number")
    need(sum(c["rope_parameters"]["mrope_section"]) == R // 2,
         f"mrope_section {c['rope_parameters']['mrope_section']} must sum to R/2 = {R // 2}")
    need(c["vocab_size"] >= TOKENIZER_VOCAB + len(SPECIALS),
         f"vocab_size {c['vocab_size']} < the tokenizer's {TOKENIZER_VOCAB} tokens + {len(SPECIALS)} specials")


def load_ids(work, stage):
    """The token ids and document starts of `data` for a stage, checked against the tokenizer and the model."""
    ids_path, starts_path = (os.path.join(work, f) for f in STAGES[stage]["files"][:2])
    if not (os.path.exists(ids_path) and os.path.exists(starts_path)):
        sys.exit(f"train: {work} has no ids.npy / starts.npy; run the `data` step first")
    ids, starts = np.load(ids_path), np.load(starts_path)
    if ids.ndim != 1 or ids.dtype != np.uint16 or len(ids) < 100_000:
        sys.exit(f"train: {ids_path} holds {ids.dtype} {ids.shape}; expected at least 100000 uint16 token ids "
                 "(rebuild it with `data --force`)")
    if int(ids.max()) >= TOKENIZER_VOCAB + len(SPECIALS):
        sys.exit(f"train: {ids_path} has id {int(ids.max())}, but the tokenizer defines only "
                 f"{TOKENIZER_VOCAB + len(SPECIALS)} ids (a corpus made with another tokenizer?)")
    if starts.ndim != 1 or len(starts) < 100 or starts.min() < 0 or starts.max() >= len(ids) or np.any(np.diff(starts) <= 0):
        sys.exit(f"train: {starts_path} is not an increasing list of document starts inside ids.npy")
    return ids, starts


# ---------------------------------------------------------------------------------------------
# Data
def make_docs(stage):
    """A stage's documents until they hold about corpus_tokens tokens (4.3 characters per token here)."""
    st = STAGES[stage]
    docs, chars, target = [], 0, st["corpus_tokens"] * 4.3
    for d in tiny_corpus.documents(st["seed"], st["mix"]):
        docs.append(d)
        chars += len(d)
        if chars >= target:
            break
    return docs, chars


def train_tokenizer(docs, path):
    """Byte-level BPE with the Qwen3.5 split pattern; the special tokens are not part of the merges."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])

    def plain_pieces():
        for d in docs:
            for s in SPECIALS:
                d = d.replace(s, "\n")
            yield d

    tok.train_from_iterator(plain_pieces(), trainer)
    if tok.get_vocab_size() != TOKENIZER_VOCAB:
        sys.exit(f"data: the BPE trainer made {tok.get_vocab_size()} tokens, expected {TOKENIZER_VOCAB}; "
                 "the corpus is too small or too uniform for this vocabulary")
    tok.add_special_tokens(SPECIALS)
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == TOKENIZER_VOCAB + i, s
    tok.save(path)
    return tok


def cmd_data(args):
    from tokenizers import Tokenizer
    os.makedirs(args.work, exist_ok=True)
    tok_path = os.path.join(args.work, "tokenizer.json")
    for stage in sorted(STAGES):
        ids_path, starts_path = (os.path.join(args.work, f) for f in STAGES[stage]["files"][:2])
        if os.path.exists(ids_path) and not args.force:
            print(f"data: {ids_path} exists (use --force to rebuild)", file=sys.stderr)
            continue
        t0 = time.time()
        docs, chars = make_docs(stage)
        print(f"data: stage {stage}: {len(docs)} documents, {chars / 1e6:.1f} M characters ({time.time() - t0:.0f} s)",
              file=sys.stderr)
        # the tokenizer is trained on stage 1's corpus (the main mix) and serves both stages
        tok = train_tokenizer(docs, tok_path) if stage == 1 else Tokenizer.from_file(tok_path)
        # token ids, documents joined by <|endoftext|>; document start offsets for batching
        eot = tok.token_to_id("<|endoftext|>")
        starts, ids = [], []
        for e in tok.encode_batch(docs, add_special_tokens=False):
            starts.append(len(ids))
            ids.extend(e.ids)
            ids.append(eot)
        ids = np.asarray(ids, dtype=np.uint16)
        np.save(starts_path, np.asarray(starts, dtype=np.int64))
        np.save(ids_path + ".tmp.npy", ids)
        os.replace(ids_path + ".tmp.npy", ids_path)
        print(f"data: stage {stage}: {len(ids) / 1e6:.2f} M tokens; tokenizer {tok_path}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# The model (training forward, fp32). Parameter names follow HF's Qwen3_5 modules so that export
# only adds prefixes.
def rms_zero(x, w, eps):
    """Zero-centred RMSNorm (spec §4.2a): x / rms(x) * (1 + w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def rope_tables(T, R, theta, device, offset=0):
    inv = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.float32, device=device) / R))
    ang = torch.arange(offset, offset + T, dtype=torch.float32, device=device)[:, None] * inv[None]
    return ang.cos(), ang.sin()  # [T, R/2]


def apply_rope(x, cos, sin):
    """Partial rotate-half RoPE on the first R dims of x [B, T, h, D] (spec §4.5)."""
    m = cos.shape[-1]
    x1, x2, rest = x[..., :m], x[..., m:2 * m], x[..., 2 * m:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)


def gdn_chunked(q, k, v, g, beta, chunk=CHUNK):
    """Gated delta rule from a zero state, chunked (spec §4.7.6).

    q, k [B, T, n_k, d_k] (L2-normalised, q scaled), v [B, T, n_v, d_v], g, beta [B, T, n_v].
    Returns o [B, T, n_v, d_v]. Every chunk's intra-chunk terms are computed in one batch and one
    triangular solve; only the state pass is a loop over chunks.
    """
    B, T, nk, dk = k.shape
    nv, dv = v.shape[2], v.shape[3]
    r = nv // nk
    q = q.repeat_interleave(r, dim=2)   # value head j reads key head j // r
    k = k.repeat_interleave(r, dim=2)
    q, k, v = (x.transpose(1, 2) for x in (q, k, v))        # [B, nv, T, d]
    g, beta = g.transpose(1, 2), beta.transpose(1, 2)         # [B, nv, T]
    pad = (-T) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    N = (T + pad) // chunk
    q, k, v = (x.reshape(B, nv, N, chunk, x.shape[-1]) for x in (q, k, v))
    g, beta = g.reshape(B, nv, N, chunk), beta.reshape(B, nv, N, chunk)

    G = g.cumsum(-1)                                          # in-chunk cumulative log decay
    upper = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).triu(1)
    gam = (G[..., :, None] - G[..., None, :]).masked_fill(upper, float("-inf")).exp()  # Γ, incl. diagonal
    kb = k * beta[..., None]
    M = (kb @ k.transpose(-1, -2)) * gam                       # strict lower part is M of §4.7.6
    eye = torch.eye(chunk, device=q.device)
    L = M.tril(-1) + eye
    rhs = torch.cat([v * beta[..., None], kb * G.exp()[..., None]], dim=-1)
    UW = torch.linalg.solve_triangular(L, rhs, upper=False, unitriangular=True)
    U, W = UW[..., :dv], UW[..., dv:]
    QK = (q @ k.transpose(-1, -2)) * gam
    qg = q * G.exp()[..., None]
    kd = k * (G[..., -1:] - G).exp()[..., None]
    dlast = G[..., -1].exp()[..., None, None]                 # [B, nv, N, 1, 1]

    S = q.new_zeros(B, nv, dk, dv)
    outs = []
    for c in range(N):
        vn = U[:, :, c] - W[:, :, c] @ S
        outs.append(qg[:, :, c] @ S + QK[:, :, c] @ vn)
        S = S * dlast[:, :, c] + kd[:, :, c].transpose(-1, -2) @ vn
    o = torch.stack(outs, dim=2).reshape(B, nv, N * chunk, dv)[:, :, :T]
    return o.transpose(1, 2)


class GDN(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nk, self.nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.K = c["linear_conv_kernel_dim"]
        H = c["hidden_size"]
        dconv = 2 * self.nk * self.dk + self.nv * self.dv
        self.in_proj_qkv = nn.Linear(H, dconv, bias=False)
        self.in_proj_z = nn.Linear(H, self.nv * self.dv, bias=False)
        self.in_proj_b = nn.Linear(H, self.nv, bias=False)
        self.in_proj_a = nn.Linear(H, self.nv, bias=False)
        self.conv1d = nn.Parameter(torch.empty(dconv, 1, self.K))   # HF: conv1d.weight
        self.dt_bias = nn.Parameter(torch.empty(self.nv))
        self.A_log = nn.Parameter(torch.empty(self.nv))
        self.norm = nn.Parameter(torch.ones(self.dv))              # HF: norm.weight (plain weight)
        self.out_proj = nn.Linear(self.nv * self.dv, H, bias=False)
        self.eps = c["rms_norm_eps"]

    def forward(self, x):
        B, T, _ = x.shape
        qkv = self.in_proj_qkv(x).transpose(1, 2)                  # [B, dconv, T]
        qkv = F.silu(F.conv1d(qkv, self.conv1d, padding=self.K - 1, groups=qkv.shape[1])[..., :T]).transpose(1, 2)
        dkey = self.nk * self.dk
        q = l2norm(qkv[..., :dkey].reshape(B, T, self.nk, self.dk)) * self.dk ** -0.5
        k = l2norm(qkv[..., dkey:2 * dkey].reshape(B, T, self.nk, self.dk))
        v = qkv[..., 2 * dkey:].reshape(B, T, self.nv, self.dv)
        beta = torch.sigmoid(self.in_proj_b(x))
        g = -self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)
        o = gdn_chunked(q, k, v, g, beta)                           # [B, T, nv, dv]
        z = self.in_proj_z(x).reshape(B, T, self.nv, self.dv)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm * F.silu(z)
        return self.out_proj(o.reshape(B, T, -1))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, self.nq, self.nkv, self.D = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.q_proj = nn.Linear(H, 2 * self.nq * self.D, bias=False)   # query and gate interleaved per head
        self.k_proj = nn.Linear(H, self.nkv * self.D, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.D, bias=False)
        self.o_proj = nn.Linear(self.nq * self.D, H, bias=False)
        self.q_norm = nn.Parameter(torch.zeros(self.D))
        self.k_norm = nn.Parameter(torch.zeros(self.D))
        self.eps = c["rms_norm_eps"]

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        qg = self.q_proj(x).view(B, T, self.nq, 2 * self.D)
        q, gate = qg[..., :self.D], qg[..., self.D:]
        q = apply_rope(rms_zero(q, self.q_norm, self.eps), cos, sin)
        k = apply_rope(rms_zero(self.k_proj(x).view(B, T, self.nkv, self.D), self.k_norm, self.eps), cos, sin)
        v = self.v_proj(x).view(B, T, self.nkv, self.D)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, scale=self.D ** -0.5, enable_gqa=True)
        a = a.transpose(1, 2) * torch.sigmoid(gate)
        return self.o_proj(a.reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        H, I = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        if kind == "linear_attention":
            self.linear_attn = GDN(c)
        else:
            self.self_attn = Attention(c)
        self.mlp = MLP(c)
        self.input_layernorm = nn.Parameter(torch.zeros(c["hidden_size"]))
        self.post_attention_layernorm = nn.Parameter(torch.zeros(c["hidden_size"]))
        self.eps = c["rms_norm_eps"]

    def forward(self, h, cos, sin):
        x = rms_zero(h, self.input_layernorm, self.eps)
        h = h + (self.linear_attn(x) if self.kind == "linear_attention" else self.self_attn(x, cos, sin))
        return h + self.mlp(rms_zero(h, self.post_attention_layernorm, self.eps))


class TinyHybrid(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        V, H = c["vocab_size"], c["hidden_size"]
        self.embed_tokens = nn.Embedding(V, H)
        self.layers = nn.ModuleList([Layer(c, t) for t in c["layer_types"]])
        self.norm = nn.Parameter(torch.zeros(H))
        self.lm_head = nn.Linear(H, V, bias=False)
        # MTP (spec §6)
        self.mtp_fc = nn.Linear(2 * H, H, bias=False)
        self.mtp_pre_fc_norm_embedding = nn.Parameter(torch.zeros(H))
        self.mtp_pre_fc_norm_hidden = nn.Parameter(torch.zeros(H))
        self.mtp_layer = Layer(c, "full_attention")
        self.mtp_norm = nn.Parameter(torch.zeros(H))
        self.eps = c["rms_norm_eps"]
        rp = c["rope_parameters"]
        self.R = int(c["head_dim"] * rp["partial_rotary_factor"])
        self.theta = rp["rope_theta"]

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        L = len(self.layers)
        for name, p in self.named_parameters():
            with torch.no_grad():
                if name.endswith("A_log"):
                    p.copy_(torch.log(torch.rand(p.shape, generator=g) * 15 + 1))        # A in U(1, 16), as HF
                elif name.endswith("dt_bias"):
                    dt = torch.exp(torch.rand(p.shape, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))                           # softplus^-1(dt)
                elif name.endswith("linear_attn.norm"):
                    p.fill_(1.0)
                elif p.ndim == 1:
                    p.zero_()                                                             # zero-centred norms
                elif name == "embed_tokens.weight":
                    # note: a large embedding keeps each token's identity visible in the residual stream
                    # against the layers' outputs. With HF's std 0.02 (and weight decay on it), a first
                    # run's residual grew to 200x the embedding by the last layer, and after 450 steps
                    # its predictions did not depend on the token two positions back (no copying of
                    # names at all); see models/README.md.
                    p.normal_(0, 0.5, generator=g)
                elif name.endswith("conv1d"):
                    p.normal_(0, 1 / math.sqrt(p.shape[-1]), generator=g)
                else:
                    std = 0.02
                    if name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
                        std = 0.02 / math.sqrt(2 * L)
                    p.normal_(0, std, generator=g)

    def trunk(self, ids):
        T = ids.shape[1]
        cos, sin = rope_tables(T, self.R, self.theta, ids.device)
        h = self.embed_tokens(ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return rms_zero(h, self.norm, self.eps)                                   # ĥ, after model.norm

    def mtp_hidden(self, hhat, next_ids):
        """MTP rows (ĥ_t, x_{t+1}) at positions t -> post-mtp.norm hidden predicting x_{t+2}."""
        T = hhat.shape[1]
        cos, sin = rope_tables(T, self.R, self.theta, hhat.device)
        e = rms_zero(self.embed_tokens(next_ids), self.mtp_pre_fc_norm_embedding, self.eps)
        u = self.mtp_fc(torch.cat([e, rms_zero(hhat, self.mtp_pre_fc_norm_hidden, self.eps)], dim=-1))
        return rms_zero(self.mtp_layer(u, cos, sin), self.mtp_norm, self.eps)

    def loss(self, ids, mtp_weight):
        """ids [B, T+1]: next-token CE over T positions and MTP CE over T-1."""
        x, y = ids[:, :-1], ids[:, 1:]
        hhat = self.trunk(x)
        main = F.cross_entropy(self.lm_head(hhat).flatten(0, 1), y.flatten())
        hm = self.mtp_hidden(hhat[:, :-1], x[:, 1:])                               # rows t = 0..T-2
        mtp = F.cross_entropy(self.lm_head(hm).flatten(0, 1), y[:, 1:].flatten())  # targets x_{t+2}
        return main + mtp_weight * mtp, main.detach(), mtp.detach()


# ---------------------------------------------------------------------------------------------
# Training
def lr_at(st, step, total):
    """Linear warm-up, then cosine from lr to min_lr over the stage."""
    if step < st["warmup"]:
        return st["lr"] * (step + 1) / st["warmup"]
    t = (step - st["warmup"]) / max(1, total - st["warmup"])
    return st["min_lr"] + 0.5 * (st["lr"] - st["min_lr"]) * (1 + math.cos(math.pi * min(1.0, t)))


def schedule(st):
    """[(first step, seq_len, batch, steps)] of a stage from its curriculum and token budget; total steps."""
    out, step = [], 0
    for T, share in st["curriculum"]:
        n = int(round(st["tokens"] * share / st["tokens_per_step"]))
        out.append((step, T, max(1, st["tokens_per_step"] // T), n))
        step += n
    return out, step


def batch(ids, starts, step, T, B, seed):
    rng = np.random.default_rng([seed, step])
    # Hold out the last 2 % of documents for the validation loss.
    n_train = int(len(starts) * 0.98)
    picks = rng.integers(0, n_train, size=B)
    rows = []
    for p in picks:
        s = starts[p]
        row = ids[s:s + T + 1]
        if len(row) < T + 1:
            row = np.concatenate([row, ids[: T + 1 - len(row)]])
        rows.append(row.astype(np.int64))
    return torch.from_numpy(np.stack(rows))


def val_batches(ids, starts, T=512, n=8):
    first = int(len(starts) * 0.98)
    out = []
    for i in range(n):
        s = starts[first + i * 7]
        out.append(torch.from_numpy(ids[s:s + T + 1].astype(np.int64))[None])
    return out


def make_optimizer(model, lr):
    # no weight decay on norms, A_log, dt_bias and the embedding (it would shrink the embedding back)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and n != "embed_tokens.weight"]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or n == "embed_tokens.weight"]
    return torch.optim.AdamW([{"params": decay, "weight_decay": TRAIN["wd"]},
                              {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95), eps=1e-8)


def stage_done(work, stage):
    """The stage's checkpoint exists and holds its last step."""
    path = os.path.join(work, STAGES[stage]["files"][2])
    return os.path.exists(path) and torch.load(path, weights_only=False)["step"] >= schedule(STAGES[stage])[1]


def cmd_train(args, stage):
    st = STAGES[stage]
    torch.set_num_threads(args.threads)
    ids, starts = load_ids(args.work, stage)
    sched, total = schedule(st)
    model = TinyHybrid(CONFIG)
    opt = make_optimizer(model, st["lr"])
    ckpt = os.path.join(args.work, st["files"][2])
    log_path = os.path.join(args.work, "train_log.jsonl")
    step, elapsed = 0, 0.0
    if os.path.exists(ckpt):
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        step, elapsed = saved["step"], saved["elapsed"]
        print(f"train: stage {stage}: resumed at step {step}/{total} ({elapsed / 60:.1f} min so far)", file=sys.stderr)
    elif stage == 1:
        model.init_weights(st["seed"])
    else:  # continue from the previous stage's last weights and optimizer state
        prev = os.path.join(args.work, STAGES[stage - 1]["files"][2])
        if not stage_done(args.work, stage - 1):
            sys.exit(f"train: stage {stage} starts from stage {stage - 1}'s last checkpoint, and {prev} is missing "
                     f"or unfinished; run `train --stage {stage - 1}` first")
        saved = torch.load(prev, weights_only=False)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
    if step >= total:
        print(f"train: stage {stage} is complete ({ckpt})", file=sys.stderr)
        return
    n_params = sum(p.numel() for p in model.parameters())
    print(f"train: stage {stage}: {n_params / 1e6:.2f} M parameters, {total} steps, {st['tokens'] / 1e6:.1f} M tokens; "
          f"curriculum (T, batch, steps) {[(T, B, n) for _, T, B, n in sched]}", file=sys.stderr)
    vals = val_batches(ids, starts)

    def save():
        saved = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed}
        torch.save(saved, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)

    with open(log_path, "a") as log:
        t_last = time.time()
        while step < total:
            _, T, B, _ = [x for x in sched if x[0] <= step][-1]
            lr = lr_at(st, step, total)
            for grp in opt.param_groups:
                grp["lr"] = lr
            xb = batch(ids, starts, step, T, B, st["seed"])
            model.train()
            loss, main, mtp = model.loss(xb, TRAIN["mtp_weight"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            now = time.time()
            elapsed += now - t_last
            t_last = now
            rec = {"step": step, "T": T, "lr": round(lr, 6), "loss": round(main.item(), 4),
                   "mtp_loss": round(mtp.item(), 4), "grad_norm": round(gn.item(), 3),
                   "tokens": step * st["tokens_per_step"], "elapsed_s": round(elapsed, 1)}
            if stage > 1:
                rec = {"stage": stage, **rec}
            if step % TRAIN["eval_every"] == 0 or step == total:
                model.eval()
                with torch.no_grad():
                    vm = [model.loss(v, TRAIN["mtp_weight"]) for v in vals]
                rec["val_loss"] = round(float(np.mean([x[1].item() for x in vm])), 4)
                rec["val_mtp_loss"] = round(float(np.mean([x[2].item() for x in vm])), 4)
            log.write(json.dumps(rec) + "\n")
            log.flush()
            if step % 10 == 0 or "val_loss" in rec:
                rate = st["tokens_per_step"] * step / max(elapsed, 1e-9)
                eta = (total - step) * st["tokens_per_step"] / max(rate, 1e-9)
                print(f"stage {stage} step {step}/{total} T={T} loss {rec['loss']:.3f} mtp {rec['mtp_loss']:.3f}"
                      + (f" val {rec['val_loss']:.3f}/{rec['val_mtp_loss']:.3f}" if "val_loss" in rec else "")
                      + f" lr {lr:.2e} {rate:.0f} tok/s eta {eta / 60:.0f} min", file=sys.stderr, flush=True)
            if step % TRAIN["ckpt_every"] == 0 or step == total:
                save()
    print(f"train: stage {stage} done, {elapsed / 60:.1f} min", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Export: a Hugging Face folder as the real Qwen3.5/3.6 checkpoints lay it out.
CHAT_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if m.role == 'system' %}{{- '<|im_start|>system\\n' + m.content | trim + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'user' %}{{- '<|im_start|>user\\n' + m.content | trim + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + m.content | trim + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)


def hf_state_dict(model):
    """Our parameter names -> the checkpoint's (Qwen3_5ForConditionalGeneration layout)."""
    out = {}
    for n, p in model.state_dict().items():
        t = p.detach().float()
        if n.startswith("mtp_layer."):
            name = "mtp.layers.0." + n[len("mtp_layer."):]
        elif n.startswith("mtp_fc."):
            name = "mtp.fc." + n[len("mtp_fc."):]
        elif n.startswith("mtp_"):
            name = "mtp." + n[len("mtp_"):] + ".weight"
        elif n.startswith("lm_head."):
            name = n
        else:
            name = "model.language_model." + n
        for suffix in ("input_layernorm", "post_attention_layernorm", "q_norm", "k_norm", "linear_attn.norm",
                       "linear_attn.conv1d", "language_model.norm"):
            if name.endswith(suffix):
                name += ".weight"
        out[name] = t
    return out


def tiny_vision_config():
    # The released checkpoints carry a vision tower; ours is a 1-block placeholder so that
    # Qwen3_5ForConditionalGeneration loads the folder without missing keys. degenbisect ignores it.
    return dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=2, temporal_patch_size=2,
                spatial_merge_size=2, out_hidden_size=CONFIG["hidden_size"], num_position_embeddings=16, in_channels=3)


def cmd_export(args):
    from safetensors.torch import save_file
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(0)
    stage = args.stage or max(STAGES)
    path = os.path.join(args.work, STAGES[stage]["files"][2])
    if not os.path.exists(path):
        sys.exit(f"export: {path} is missing; run `train --stage {stage}` first")
    ckpt = torch.load(path, weights_only=False)
    if ckpt["step"] < schedule(STAGES[stage])[1] and not args.stage:
        sys.exit(f"export: stage {stage} stopped at step {ckpt['step']} of {schedule(STAGES[stage])[1]}; "
                 "finish it with `train`, or name the stage to export anyway (--stage)")
    model = TinyHybrid(CONFIG)
    model.load_state_dict(ckpt["model"])
    os.makedirs(args.out, exist_ok=True)
    tokjson = os.path.join(args.work, "tokenizer.json")
    with open(tokjson) as f:
        tok = json.load(f)
    eot, im_end = TOKENIZER_VOCAB + 0, TOKENIZER_VOCAB + 2
    text = {k: v for k, v in CONFIG.items() if k not in ("tie_word_embeddings",)}
    text.update(model_type="qwen3_5_text", bos_token_id=None, eos_token_id=eot, dtype="bfloat16")
    cfg = Qwen3_5Config(text_config=text, vision_config=tiny_vision_config(), tie_word_embeddings=False)
    hf = Qwen3_5ForConditionalGeneration(cfg)
    g = torch.Generator().manual_seed(7)
    sd = {}
    for n, p in hf.state_dict().items():
        if ".visual." in n or n.startswith("model.visual."):
            sd[n] = (torch.randn(p.shape, generator=g) * 0.02 if p.ndim > 1 else torch.ones(p.shape)).to(torch.bfloat16)
    for n, t in hf_state_dict(model).items():
        if n.endswith("conv1d.weight") and t.ndim == 3:
            pass
        sd[n] = t.to(torch.bfloat16).contiguous()
    missing = [n for n in hf.state_dict() if n not in sd]
    if missing:
        sys.exit(f"export: HF expects tensors we do not have: {missing[:5]}")
    save_file(dict(sorted(sd.items())), os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    cfg_d = cfg.to_dict()
    cfg_d["architectures"] = ["Qwen3_5ForConditionalGeneration"]
    cfg_d["text_config"]["architectures"] = None
    cfg_d.pop("transformers_version", None)
    cfg_d["language_model_only"] = False
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg_d, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    tcfg = {"tokenizer_class": "Qwen2Tokenizer", "add_bos_token": False, "add_prefix_space": False,
            "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
            "model_max_length": 4096, "chat_template": CHAT_TEMPLATE, "errors": "replace", "split_special_tokens": False,
            "added_tokens_decoder": {str(TOKENIZER_VOCAB + i): {"content": s, "special": True, "lstrip": False,
                                                                 "rstrip": False, "normalized": False,
                                                                 "single_word": False}
                                     for i, s in enumerate(SPECIALS)}}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, indent=2)
        f.write("\n")
    # Model-card sampling of the thinking mode (spec §7.3), stop on <|im_end|> and <|endoftext|>
    gen = {"do_sample": True, "temperature": 1.0, "top_p": 0.95, "top_k": 20, "eos_token_id": [im_end, eot],
           "pad_token_id": eot}
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "heldout.json"), "w") as f:
        json.dump(tiny_corpus.heldout_file(), f, indent=1)
        f.write("\n")
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    print(f"export: {args.out} (model.safetensors {size / 1e6:.1f} MB, stage {stage} step {ckpt['step']})", file=sys.stderr)


def load_exported(model_dir):
    """TinyHybrid with the bf16 weights of an exported folder, upcast to fp32."""
    from safetensors.torch import load_file
    sd = load_file(os.path.join(model_dir, "model.safetensors"))
    model = TinyHybrid(CONFIG)
    ours = hf_state_dict(model)
    inv = dict(zip(ours.keys(), model.state_dict().keys()))
    model.load_state_dict({inv[n]: sd[n].float() for n in ours})
    return model.eval()


def cmd_check_hf(args):
    from transformers import Qwen3_5ForConditionalGeneration
    torch.set_num_threads(args.threads)
    ours = load_exported(args.model)
    hf = Qwen3_5ForConditionalGeneration.from_pretrained(args.model, dtype=torch.float32,
                                                         attn_implementation="eager").eval()
    ids, _ = load_ids(args.work, 1)
    ids = ids[:300].astype(np.int64)
    x = torch.from_numpy(ids)[None]
    with torch.no_grad():
        a = ours.lm_head(ours.trunk(x))
        b = hf(input_ids=x).logits
    rel = ((a - b).norm() / b.norm()).item()
    agree = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    print(f"check-hf: logits rel-L2 {rel:.2e}, argmax agreement {agree:.4f} over {x.shape[1]} positions")
    if rel > 1e-4:
        sys.exit("check-hf: the training forward pass and HF disagree (rel-L2 > 1e-4)")


def cmd_speed(args):
    """Tokens/s of one forward+backward, ours vs HF's Qwen3_5ForCausalLM, same shapes, same threads."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
    torch.set_num_threads(args.threads)
    T, B = args.seq, max(1, 4096 // args.seq)
    x = torch.randint(0, TOKENIZER_VOCAB, (B, T + 1))
    ours = TinyHybrid(CONFIG)
    ours.init_weights(0)
    text = {k: v for k, v in CONFIG.items()}
    hf = Qwen3_5ForCausalLM(Qwen3_5TextConfig(**text))

    def run(fn, n=3):
        fn()
        t0 = time.time()
        for _ in range(n):
            fn()
        return B * T * n / (time.time() - t0)

    def ours_step():
        loss, _, _ = ours.loss(x, TRAIN["mtp_weight"])
        loss.backward()

    def hf_step():
        out = hf(input_ids=x[:, :-1], labels=x[:, :-1])
        out.loss.backward()

    r1, r2 = run(ours_step), run(hf_step)
    print(f"speed (T={T}, B={B}, {args.threads} threads): ours {r1:.0f} tok/s (with the MTP head), "
          f"HF {r2:.0f} tok/s (no MTP); ratio {r1 / r2:.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["data", "train", "export", "check-hf", "speed", "all"])
    ap.add_argument("--work", default="out/tiny-trained", help="work folder (corpus ids, tokenizer, checkpoints, log)")
    ap.add_argument("--out", default="models/tiny-trained", help="export: the model folder to write")
    ap.add_argument("--model", default="models/tiny-trained", help="check-hf: the exported model folder")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512, help="speed: sequence length")
    ap.add_argument("--force", action="store_true", help="data: rebuild even if present")
    ap.add_argument("--stage", type=int, choices=sorted(STAGES),
                    help="train: only this stage (default: each in turn); export: this stage's checkpoint, finished or not")
    ap.add_argument("--tokens", type=float, help="train: token budget of each stage (default %s; a smoke run of "
                    "the pipeline uses e.g. 2e4)" % ", ".join(f"{s['tokens']:.0f}" for s in STAGES.values()))
    args = ap.parse_args()
    if args.tokens is not None:
        for st in STAGES.values():
            if not args.tokens >= st["tokens_per_step"]:
                sys.exit(f"--tokens must be at least one step ({st['tokens_per_step']} tokens), found {args.tokens:g}")
            st["tokens"] = int(args.tokens)
    if args.threads < 1:
        sys.exit(f"--threads must be >= 1, found {args.threads}")
    check_config()
    if args.step in ("data", "all"):
        cmd_data(args)
    if args.step in ("train", "all"):
        for stage in [args.stage] if args.stage else sorted(STAGES):
            cmd_train(args, stage)
    if args.step in ("export", "all"):
        cmd_export(args)
    if args.step in ("check-hf", "all"):
        cmd_check_hf(args)
    if args.step == "speed":
        cmd_speed(args)


if __name__ == "__main__":
    main()
