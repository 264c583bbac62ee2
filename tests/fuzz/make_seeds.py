#!/usr/bin/env python3
"""Seed corpora of the fuzz targets (tests/fuzz/README.md), made from the committed fixtures.

    python3 tests/fuzz/make_seeds.py OUT_DIR

writes OUT_DIR/<target>/<name> for every target of tests/fuzz/CMakeLists.txt. Targets whose input
starts with a selector byte (golden_data, sweep_matrix, sweep_results, replay, report) get it
prepended here. Only the standard library; the seeds are rebuilt on every run (they are small).
"""
import glob
import hashlib
import json
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

    # report: the committed report inputs
    for name in ("compare.json", "bisect.json"):
        add("report", name, b"\x00" + rd("tests/fixtures/report/" + name))
    add("report", "sweep.json", b"\x01" + rd("tests/fixtures/report/sweep/sweep.json"))

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
