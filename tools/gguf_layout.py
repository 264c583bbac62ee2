#!/usr/bin/env python3
"""Records how a converter-made GGUF is built from our checkpoint, for tools/gguf_rebuild.py.

    python3 tools/gguf_layout.py IN.gguf MODEL_DIR LAYOUT_DIR [--llama DIR]

Reads IN.gguf (an f32 GGUF written by llama.cpp's converter, tools/convert_gguf.py) with llama.cpp's
gguf-py (from --llama, default build/llama.cpp/src; needs numpy) and MODEL_DIR/model.safetensors.
For every tensor it looks for a source tensor of the checkpoint whose f32 values, cut into chunks
(a row, or a divisor of a row), make the GGUF tensor's bytes in some order: a plain widening is one
run of chunks, the converter's value-head reordering a few runs. Tensors the converter computes
(norm weights + 1, -exp(A_log)) match no source; their bytes go to extra.bin. Writes LAYOUT_DIR/
header.bin, layout.json, extra.bin, then rebuilds the file from them and checks it is IN.gguf's
bytes. Run it again after retraining the model or upgrading llama.cpp (then commit LAYOUT_DIR).
"""
import argparse
import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def safetensors_f32(path):
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + n:]
    out = {}
    for name, s in header.items():
        a, e = s["data_offsets"]
        raw = body[a:e]
        if s["dtype"] == "F32":
            out[name] = bytes(raw)
        elif s["dtype"] == "BF16":
            b = bytearray(2 * len(raw))
            b[2::4] = raw[0::2]
            b[3::4] = raw[1::2]
            out[name] = bytes(b)
    return out


def runs_of(idx):
    runs = []
    for i in idx:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    return runs


def match(tb, sources, row):
    """(source, chunk, runs) with the fewest runs, or None."""
    best = None
    n = len(tb) // 4
    chunks = [c for c in range(row, 0, -1) if row % c == 0 and c >= 4] or [row]
    for name, sb in sources.items():
        if len(sb) != len(tb):
            continue
        for c in chunks:
            cb = 4 * c
            first = {}
            for i in range(n // c):
                first.setdefault(sb[i * cb:(i + 1) * cb], i)
            idx = []
            for i in range(n // c):
                j = first.get(tb[i * cb:(i + 1) * cb])
                if j is None:
                    break
                idx.append(j)
            else:
                r = runs_of(idx)
                if best is None or len(r) < len(best[2]):
                    best = (name, c, r)
                break  # the largest chunk that works for this source
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf")
    ap.add_argument("model_dir")
    ap.add_argument("layout_dir")
    ap.add_argument("--llama", default=str(ROOT / "build/llama.cpp/src"))
    a = ap.parse_args()
    sys.path.insert(0, str(Path(a.llama) / "gguf-py"))
    import gguf  # llama.cpp's reader

    gpath = Path(a.gguf)
    blob = gpath.read_bytes()
    reader = gguf.GGUFReader(str(gpath))
    sources = safetensors_f32(Path(a.model_dir) / "model.safetensors")
    out = Path(a.layout_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "header.bin").write_bytes(blob[:reader.data_offset])
    extra = bytearray()
    tensors = []
    for t in reader.tensors:
        if t.tensor_type.name != "F32":
            sys.exit(f"gguf_layout.py: {t.name} is {t.tensor_type.name}; only an f32 GGUF is recorded")
        off = int(t.data_offset)  # gguf-py: the absolute file offset of the tensor's data
        n = int(t.n_bytes)
        tb = blob[off:off + n]
        row = int(t.shape[0])
        m = match(tb, sources, row)
        rec = {"name": t.name, "offset": off, "bytes": n}
        if m:
            rec.update({"source": m[0], "chunk": m[1], "runs": m[2]})
        else:
            rec["extra"] = len(extra)
            extra += tb
        tensors.append(rec)
        print(f"  {t.name:40s} {'<- ' + m[0] + f' ({len(m[2])} runs of {m[1]})' if m else 'extra (computed by the converter)'}")
    (out / "extra.bin").write_bytes(bytes(extra))
    model_dir = Path(a.model_dir).resolve()
    layout = {"file": gpath.name, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest(),
              "source": str((model_dir / "model.safetensors").relative_to(ROOT)),
              "made_by": "llama.cpp convert_hf_to_gguf.py (tools/convert_gguf.py --outtype f32), recorded by tools/gguf_layout.py",
              "tensors": tensors}
    # One tensor per line: a retrained model's layout diffs tensor by tensor.
    head = {k: v for k, v in layout.items() if k != "tensors"}
    lines = ",\n".join("  " + json.dumps(t, separators=(",", ":")) for t in tensors)
    text = json.dumps(head, indent=1)[:-2] + ',\n "tensors": [\n' + lines + "\n ]\n}\n"
    json.loads(text)
    (out / "layout.json").write_text(text)
    print(f"gguf_layout.py: {len(tensors)} tensors, {sum('extra' in t for t in tensors)} computed ({len(extra)} bytes), "
          f"header {reader.data_offset} bytes")
    check = out / ("check-" + gpath.name)
    r = subprocess.run([sys.executable, str(ROOT / "tools/gguf_rebuild.py"), str(out), str(check)])
    if r.returncode != 0:
        return 1
    same = check.read_bytes() == blob
    check.unlink()
    print("gguf_layout.py: rebuilt file identical" if same else "gguf_layout.py: REBUILT FILE DIFFERS")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
