#!/usr/bin/env python3
"""Seed corpora of the fuzz targets (tests/fuzz/README.md), made from the committed fixtures.

    python3 tests/fuzz/make_seeds.py OUT_DIR

writes OUT_DIR/<target>/<name> for every target of tests/fuzz/CMakeLists.txt. Targets whose input
starts with a selector byte (golden_data, sweep_matrix, sweep_results, replay, report, http_llama,
http_openai, http_sglang) get it
prepended here. Only the standard library; the seeds are rebuilt on every run (they are small).
"""
import glob
import hashlib
import json
import math
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rd(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def small_safetensors(path, max_numel=512, max_tensors=12):
    """A valid safetensors file with the smallest tensors of `path` (header rewritten)."""
    raw = rd(path)
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", None)
    keep = []
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        numel = 1
        for d in t["shape"]:
            numel *= d
        if numel <= max_numel:
            keep.append((name, t))
        if len(keep) == max_tensors:
            break
    out_header, blobs, off = {}, [], 0
    if meta is not None:
        out_header["__metadata__"] = meta
    for name, t in keep:
        b, e = t["data_offsets"]
        out_header[name] = {"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [off, off + e - b]}
        blobs.append(data[b:e])
        off += e - b
    h = json.dumps(out_header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def safetensors_bytes(tensors, meta):
    """A safetensors file: tensors = [(name, dtype, shape, raw bytes)], meta = {str: str}."""
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


# The dump target's model and case (tests/fuzz/fuzz_dump.cpp): T = 3 tokens, vocabulary 16, hidden
# size 8, layers GGGA, 1 key head and 2 value heads of dimension 2, 2 query heads of dimension 4.
DUMP_T, DUMP_V, DUMP_H = 3, 16, 8
DUMP_SHAPES = {  # name (without -L) -> (layers, columns)
    "llama.cpp": [("model.input_embed", None, 8), ("attn_norm", "GGGA", 8), ("Qcur", "A", 8), ("Kcur", "A", 4),
                  ("linear_attn_qkv_mixed", "G", 8), ("z", "G", 4), ("beta", "G", 2), ("q_conv_predelta", "G", 2),
                  ("attn_output", "GGGA", None), ("ffn_out", "GGGA", 8), ("l_out", "GGGA", 8), ("result_norm", None, 8)],
    "degenbisect": [("embed", None, 8), ("attn_norm", "GGGA", 8), ("attn_q", "A", 8), ("gdn_qkv", "G", 8),
                    ("gdn_q", "G", 2), ("gdn_core", "G", 4), ("l_out", "GGGA", 8), ("final_norm", None, 8)],
}


def dump_seed(names, logit=None, dtype="F32", edit=None):
    """A well-formed dump of the fuzz_dump model; logit(t, i) gives the logits, edit(tensors) may break it."""
    x = [12345]

    def val():
        x[0] = (x[0] * 1103515245 + 12345) % (1 << 31)
        return (x[0] / float(1 << 31)) * 4.0 - 2.0

    def f32(vals):
        return struct.pack("<%df" % len(vals), *vals)

    tensors = [("logits", "F32", [DUMP_T, DUMP_V],
                f32([logit(t, i) if logit else val() for t in range(DUMP_T) for i in range(DUMP_V)]))]
    for name, layers, cols in DUMP_SHAPES[names]:
        kinds = "GGGA"  # layer L's kind; "GGGA" in the table: every layer
        for L in ([None] if layers is None else [L for L in range(4) if layers in (kinds, kinds[L])]):
            c = cols if cols is not None else (8 if L == 3 else 4)  # attn_output: o_proj (A) or gdn_core (G)
            n = name if L is None else "%s-%d" % (name, L)
            vals = [val() for _ in range(DUMP_T * c)]
            if dtype == "BF16":
                raw = b"".join(struct.pack("<f", v)[2:] for v in vals)
            else:
                raw = f32(vals)
            tensors.append((n, dtype, [DUMP_T, c], raw))
    if edit:
        tensors = edit(tensors)
    meta = {"format": "degenbisect-dump", "names": names, "case": "fuzz-case", "tokens": str(DUMP_T)}
    return safetensors_bytes(tensors, meta)


def pack_files(folder, prefix=""):
    """A folder's files as one input of the folder targets (fuzz_common.h unpack_files)."""
    out = b""
    base = os.path.join(ROOT, folder)
    for dirpath, _, names in sorted(os.walk(base)):
        for n in sorted(names):
            rel = os.path.relpath(os.path.join(dirpath, n), base)
            out += b"\0FILE " + (prefix + rel).encode() + b"\n" + rd(os.path.join(folder, rel))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_seeds.py OUT_DIR")
    out = sys.argv[1]
    seeds = {}

    def add(target, name, data):
        seeds.setdefault(target, {})[name] = data if isinstance(data, bytes) else data.encode()

    g = "tests/fuzz/seeds/golden-mini"
    manifest = json.loads(rd(g + "/manifest.json"))

    # safetensors: the seed record's data files and the small tensors of real checkpoints
    for f in sorted(glob.glob(os.path.join(ROOT, g, "*.safetensors"))):
        add("safetensors", "golden-" + os.path.basename(f), rd(os.path.relpath(f, ROOT)))
    for p in ["models/tiny-trained/model.safetensors"] + sorted(
            os.path.relpath(f, ROOT) for f in glob.glob(os.path.join(ROOT, "tests/fixtures/hf/*/model.safetensors"))):
        add("safetensors", p.replace("/", "_"), small_safetensors(p))

    # config: every committed config.json
    for p in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/configs/*.json")) +
                    glob.glob(os.path.join(ROOT, "tests/fixtures/hf/*/config.json")) +
                    glob.glob(os.path.join(ROOT, "models/*/config.json"))):
        rel = os.path.relpath(p, ROOT)
        add("config", rel.replace("/", "_"), rd(rel))

    # tokenizer: the committed tokenizer.json files
    for p in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/tokenizer/*/tokenizer.json")) +
                    [os.path.join(ROOT, "models/tiny-trained/tokenizer.json")]):
        rel = os.path.relpath(p, ROOT)
        add("tokenizer", rel.replace("/", "_"), rd(rel))

    # cases and encode: the committed suites, and their texts
    for p in sorted(glob.glob(os.path.join(ROOT, "cases/*.json")) + glob.glob(os.path.join(ROOT, "cases/*/*.json")) +
                    [os.path.join(ROOT, "tests/fuzz/seeds/mini-cases.json")]):
        rel = os.path.relpath(p, ROOT)
        doc = json.loads(rd(rel))
        if not isinstance(doc, dict) or "cases" not in doc:
            continue
        add("cases", rel.replace("/", "_"), rd(rel))
        for c in doc["cases"]:
            for k in ("prompt", "raw", "system"):
                if isinstance(c.get(k), str):
                    add("encode", "%s_%s_%s" % (os.path.basename(rel), c.get("id", "?"), k), c[k])
    add("encode", "specials", "<|im_start|>user\nhi<|im_end|>\n<think>\n\n</think>\n\nok")

    # golden_manifest and golden_data: the seed record
    add("golden_manifest", "manifest.json", rd(g + "/manifest.json"))
    for i, c in enumerate(manifest["cases"]):
        add("golden_data", c["file"], bytes([i]) + rd(g + "/" + c["file"]))

    # run_config: every configuration string the committed matrices and suites spell
    configs = {"", "backend=cuda", "attn=flash@3", "gdn=recurrent,ssm_dtype=bf16@0-2,5",
               "fault=rope-interleaved@3", "backend=cuda,tp=2,mtp=2,graphs=on", "temp=0.6,top_p=0.95,seed=7"}
    matrices = [os.path.relpath(p, ROOT) for p in sorted(glob.glob(os.path.join(ROOT, "cases/matrix*.json")) +
                                                         glob.glob(os.path.join(ROOT, "tests/fixtures/report/matrix.json")))]
    for rel in matrices:
        m = json.loads(rd(rel))
        configs.add(m.get("base", ""))
        axes = m.get("axes", [])
        if isinstance(axes, dict):
            axes = [{"name": k, "values": v} for k, v in axes.items()]
        for a in axes:
            for v in a["values"]:
                configs.add(v if "=" in v else "%s=%s" % (a["name"], v))
        for c in m.get("cells", []):
            configs.add(c)
    for i, c in enumerate(sorted(configs)):
        add("run_config", "config-%02d" % i, c)

    # sweep_matrix: the committed matrices as toggle matrices (0) and a server matrix (1)
    for rel in matrices:
        add("sweep_matrix", rel.replace("/", "_"), b"\x00" + rd(rel))
    add("sweep_matrix", "server.json", b"\x01" + json.dumps(
        {"name": "server", "base": "ctx=4096", "axes": {"attention-backend": ["flashinfer", "triton"], "mtp": ["0", "2"]}}).encode())

    # sweep_results, replay: lines as the tool writes them, with the identity the harnesses check
    identity = {"model": "fuzz", "golden": "sha256:0", "cases": "all", "decode": True}
    fixture = [json.loads(l) for l in rd("tests/fixtures/report/sweep/results.jsonl").decode().splitlines() if l]
    add("sweep_results", "fixture-0", b"\x00" + rd("tests/fixtures/report/sweep/results.jsonl"))
    cells = ["", "attn=flash", "gdn=recurrent", "attn=flash,gdn=recurrent"]
    lines = []
    for i, cell in enumerate(cells[:3]):
        row = dict(fixture[i % len(fixture)])
        row.update({"cell": cell, "index": i, "identity": identity})
        lines.append(json.dumps(row))
    add("sweep_results", "resume-1", b"\x01" + ("\n".join(lines) + "\n").encode())
    add("sweep_results", "partial-1", b"\x01" + ("\n".join(lines))[:-7].encode())
    summaries = [r for r in fixture]
    replay = []
    for i, cell in enumerate(["", "attn=flash"]):
        s = {k: summaries[i % len(summaries)].get(k) for k in ("verdict", "reason", "worst_layer", "kld_mean", "seq_rep_4", "loop_onset", "detail")}
        replay.append(json.dumps({"config": cell, "why": "fuzz seed", "identity": identity, "summary": s}))
    add("replay", "replay-1", b"\x01" + ("\n".join(replay) + "\n").encode())
    add("replay", "replay-0", b"\x00" + ("\n".join(replay) + "\n").encode())

    # dump: well-formed dumps of the fuzz_dump model in both naming tables (no dump is committed:
    # llama-dump and tools/hf_dump_hooks.py write them), 16-bit ones, and impossible logits (issue 40)
    add("dump", "llama.cpp", dump_seed("llama.cpp"))
    add("dump", "degenbisect", dump_seed("degenbisect"))
    add("dump", "bf16", dump_seed("degenbisect", dtype="BF16"))
    add("dump", "logits-plus-1e20", dump_seed("llama.cpp", logit=lambda t, i: 1e20 + (i % 7)))
    add("dump", "logits-3e38", dump_seed("llama.cpp", logit=lambda t, i: 3e38))
    add("dump", "logits-nan", dump_seed("llama.cpp", logit=lambda t, i: float("nan") if i == 3 else 0.5 * i))

    # report: the committed report inputs
    for name in ("compare.json", "bisect.json"):
        add("report", name, b"\x00" + rd("tests/fixtures/report/" + name))
    add("report", "sweep.json", b"\x01" + rd("tests/fixtures/report/sweep/sweep.json"))

    # http_llama, http_openai: server answers (byte 0: which request; http_openai byte 1: the prompt
    # length for prompt_logprobs), in the shapes of llama-server's native and OpenAI APIs and of vLLM's
    # (tests/cli/vllm_shape_proxy.py writes the same), with a few made-up ids and log-probs.
    def tl(i, lp, tok="x"):
        return {"id": i, "token": tok, "bytes": list(tok.encode()), "logprob": lp}
    top = [tl(12, -0.05, " 4"), tl(7, -3.2, " four"), tl(1999, -6.5, "\u00e9"), tl(3, None, "")]
    llama_pos = {"index": 0, "content": " 4", "tokens": [12], "id_slot": 0, "stop": True, "model": "tiny",
                 "tokens_predicted": 1, "tokens_evaluated": 17, "stop_type": "limit", "stopping_word": "",
                 "completion_probabilities": [dict(tl(12, -0.05, " 4"), top_logprobs=top)]}
    add("http_llama", "position", b"\x00" + json.dumps(llama_pos).encode())
    add("http_llama", "generation", b"\x01" + json.dumps(
        {"content": " 4.", "tokens": [12, 5, 1999, 0], "stop": True, "stop_type": "eos", "tokens_predicted": 4}).encode())
    add("http_llama", "generation-empty", b"\x01" + json.dumps({"content": "", "tokens": [], "stop_type": "eos"}).encode())
    add("http_llama", "detokenize", b"\x02" + json.dumps({"content": "What is 2 + 2?"}).encode())
    llama_oai = {"id": "cmpl-1", "object": "text_completion", "model": "tiny", "choices": [{"index": 0, "text": " 4",
                 "finish_reason": "length", "logprobs": {"content": [dict(tl(12, -0.05, " 4"), top_logprobs=top)]}}]}
    add("http_openai", "llama-position", b"\x00\x00" + json.dumps(llama_oai).encode())
    add("http_openai", "llama-generation", b"\x02\x00" + json.dumps(llama_oai).encode())
    classic = {"tokens": ["token_id:12", "token_id:5"], "token_logprobs": [-0.05, -0.4],
               "top_logprobs": [{"token_id:12": -0.05, "token_id:7": -3.2}, {"token_id:5": -0.4, "token_id:9": -1.6}],
               "text_offset": [0, 2]}
    vllm = {"id": "cmpl-2", "object": "text_completion", "model": "tiny", "choices": [{"index": 0, "text": " 4.",
            "finish_reason": "stop", "logprobs": classic,
            "prompt_logprobs": [None] + [{"12": {"logprob": -0.1, "rank": 1, "decoded_token": " 4"},
                                          "7": {"logprob": -2.5, "rank": 2, "decoded_token": " four"}}] * 3}]}
    add("http_openai", "vllm-position", b"\x00\x00" + json.dumps(vllm).encode())
    add("http_openai", "vllm-prompt-logprobs", b"\x01\x03" + json.dumps(vllm).encode())
    add("http_openai", "vllm-generation", b"\x02\x00" + json.dumps(vllm).encode())
    add("http_openai", "vllm-detokenize", b"\x03\x00" + json.dumps({"prompt": "What is 2 + 2?"}).encode())
    # SGLang's /generate (issue 42; tests/cli/sglang_shape_proxy.py writes the same shapes): byte 0 4 the
    # teacher-forced answer over 1 + byte 1 % 16 ids, each 1 + byte 1 % 3 (here 3 ids of 1: byte 1 = 18,
    # and 3 ids of 3: byte 1 = 2), 5 a generation (with per-step lists when byte 1 >= 128), 6 /v1/models
    def sg_seq(tok):
        row = [[-0.25, tok, None], [-1.75, 0, None]]
        return {"text": "", "output_ids": [tok], "meta_info": {
            "id": "x", "prompt_tokens": 3, "completion_tokens": 1, "cached_tokens": 0,
            "finish_reason": {"type": "length", "length": 1},
            "input_token_logprobs": [[None, tok, None], [-0.25, tok, None], [-0.25, tok, None]],
            "input_top_logprobs": [None, row, row], "output_token_logprobs": [[-0.25, tok, None]],
            "output_top_logprobs": [row]}}
    add("http_openai", "sglang-sequence", b"\x04\x12" + json.dumps(sg_seq(1)).encode())
    add("http_openai", "sglang-sequence-3", b"\x04\x02" + json.dumps(sg_seq(3)).encode())
    sg_gen = {"text": " 4.", "output_ids": [12, 5], "meta_info": {
        "cached_tokens": 16, "finish_reason": {"type": "stop", "matched": 5}, "spec_verify_ct": 1, "spec_accept_length": 2.0,
        "output_token_logprobs": [[-0.05, 12, None], [-0.4, 5, " ."]],
        "output_top_logprobs": [[[-0.05, 12, None], [-3.2, 7, None]], None]}}
    add("http_openai", "sglang-generation", b"\x05\x80" + json.dumps(sg_gen).encode())
    add("http_openai", "sglang-generation-batch", b"\x05\x00" + json.dumps([sg_gen]).encode())
    add("http_openai", "models", b"\x06\x00" + json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())

    # http_sglang: SGLang's /generate answers (the shapes of tests/cli/sglang_shape_proxy.py and
    # docs/server.md; byte 0 the request, byte 1 the teacher-forced sequences' shape, byte 2 the
    # sampling, byte 3 the vocabulary for the steps taken back: fuzz_http_sglang.cpp)
    def sg_hdr(which, shape=0, sampling=0, vocab=0):
        return bytes([which, shape, sampling, vocab])
    add("http_sglang", "sequence-1x3", sg_hdr(0, 0x04) + json.dumps([sg_seq(1)]).encode())
    add("http_sglang", "sequences-2x3", sg_hdr(0, 0x25) + json.dumps([sg_seq(3), sg_seq(3)]).encode())
    add("http_sglang", "generation", sg_hdr(1) + json.dumps(sg_gen).encode())
    add("http_sglang", "generation-aborted", sg_hdr(1) + json.dumps(
        {"text": "", "output_ids": [], "meta_info": {"finish_reason": {"type": "abort", "message": "out of memory"},
                                                      "output_token_logprobs": []}}).encode())

    def full_step(ids, logits):
        """A listing of the whole vocabulary (every id once), log-softmax of `logits`, as SGLang's triples."""
        mx = max(logits)
        lse = mx + math.log(sum(math.exp(z - mx) for z in logits))
        return sorted(([z - lse, i, None] for i, z in zip(ids, logits)), key=lambda t: -t[0])
    steps = [full_step([0, 1, 2, 3], [2.0, 0.5, -1.0, -3.0]), full_step([0, 1, 2, 3], [0.1, 1.9, -0.5, -2.5])]
    sg_steps = {"text": " ab", "output_ids": [0, 1], "meta_info": {
        "id": "x", "prompt_tokens": 5, "completion_tokens": 2, "cached_tokens": 4,
        "finish_reason": {"type": "length", "length": 2},
        "output_token_logprobs": [[steps[0][0][0], 0, None], [steps[1][0][0], 1, " b"]],
        "output_top_logprobs": steps}}
    # temp 0.7 with presence_pen 1.5 (byte 2 = 7), a vocabulary of 4 (byte 3 = 3): every step taken back
    add("http_sglang", "steps-temp-presence", sg_hdr(2, 0, 7, 3) + json.dumps(sg_steps).encode())
    add("http_sglang", "steps-greedy", sg_hdr(2, 0, 0, 3) + json.dumps(sg_steps).encode())
    add("http_sglang", "steps-rep-pen", sg_hdr(2, 0, 24 + 1, 3) + json.dumps(sg_steps).encode())
    add("http_sglang", "steps-top2-of-4", sg_hdr(2, 0, 1, 3) + json.dumps(dict(sg_steps, meta_info=dict(
        sg_steps["meta_info"], output_top_logprobs=[st[:2] for st in steps]))).encode())
    add("http_sglang", "batched-probe", sg_hdr(3, 0, 7, 3) + json.dumps([sg_steps, sg_gen, sg_gen]).encode())

    # http_body: answers cut into chunks under a cap (bytes 0-1 the cap, byte 2 the number of chunk
    # sizes, then the sizes, then the body: fuzz_http_body.cpp)
    def body_seed(cap, sizes, body):
        return struct.pack("<H", cap) + bytes([len(sizes)] + sizes) + body
    answer = json.dumps(llama_pos).encode()
    add("http_body", "one-chunk", body_seed(0xffff, [], answer))
    add("http_body", "chunks-under-cap", body_seed(len(answer), [1, 7, 100, 0x81], answer))
    add("http_body", "one-byte-over", body_seed(len(answer) - 1, [64], answer))
    add("http_body", "empty-chunks", body_seed(50, [0, 3, 0], b'{"content": "hi"}'))
    add("http_body", "empty-body", body_seed(0, [], b""))

    # manifest_numbers: the seed record's manifest with 10-byte records (place, kind, payload) writing
    # numbers into it (fuzz_manifest_numbers.cpp); the empty input is the seed itself
    add("manifest_numbers", "seed", b"")
    for i, (kind, payload) in enumerate([(3, 0), (3, 1), (3, 3), (3, 8), (3, 10), (4, 0), (4, 2), (5, 0), (7, 0),
                                         (8, 0), (10, 0), (6, 1)]):
        recs = b"".join(bytes([(i * 37 + k * 101) % 256, kind, payload]) + b"\0" * 7 for k in range(3))
        add("manifest_numbers", "kind-%d-%d" % (kind, payload), recs)

    # golden_resume: the seed resume state (a golden-mini run with --batch all killed after its first
    # case), whole, without its generations, and without its finished case
    gr = "tests/fuzz/seeds/golden-resume"
    add("golden_resume", "killed-after-case-0", pack_files(gr))
    add("golden_resume", "no-generations", b"".join(
        b"\0FILE " + p.encode() + b"\n" + rd(gr + "/" + p) for p in ("resume/resume.json", "resume/hi.case.json", "partial/hi.safetensors")))
    add("golden_resume", "key-only", b"\0FILE resume/resume.json\n" + rd(gr + "/resume/resume.json") +
        b"\0FILE partial/manifest.json\n{}")

    # sweep_shards: a real sweep in two shards (sweep --shard 1/2, 2/2 of a 4-cell matrix), both and one
    ss = "tests/fuzz/seeds/sweep-shards"
    add("sweep_shards", "two-shards", pack_files(ss))
    add("sweep_shards", "shard-1-alone", pack_files(ss + "/1", "1/"))
    add("sweep_shards", "fixture-1-of-1", pack_files("tests/fixtures/report/sweep", "1/"))

    for target, files in seeds.items():
        d = os.path.join(out, target)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in name)[:120]
            with open(os.path.join(d, safe), "wb") as f:
                f.write(data)
    print("make_seeds: %s" % ", ".join("%s %d" % (t, len(f)) for t, f in sorted(seeds.items())))


if __name__ == "__main__":
    main()
