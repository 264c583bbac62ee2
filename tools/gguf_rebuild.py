#!/usr/bin/env python3
"""Rebuilds a GGUF made by llama.cpp's converter from its recorded layout and our checkpoint.

    python3 tools/gguf_rebuild.py LAYOUT_DIR [OUT.gguf [SOURCE.safetensors]]

Why: the trained model's f32 GGUF (models/tiny-trained-gguf, made by llama.cpp's own
convert_hf_to_gguf.py through tools/convert_gguf.py) is 20 MB, four times too large to keep in git,
and the converter needs torch, which a CI machine does not have. Its bytes are almost all our own
weights moved about: widened from bf16 to f32 and, for the value heads, reordered. LAYOUT_DIR
(written by tools/gguf_layout.py from a converter output) holds what is not:
  header.bin   the GGUF header as the converter wrote it (metadata, vocabulary, tensor table), up to
               the first tensor's data;
  layout.json  for every tensor: its offset and size, and either its source tensor in the checkpoint
               with the runs of source chunks that make it, or a range of extra.bin; the SHA-256 of
               the whole file;
  extra.bin    the few small tensors the converter computes rather than moves (norm weights + 1,
               -exp(A_log)): their bytes as it wrote them.
SOURCE.safetensors replaces the checkpoint the layout names (layout.json "source", relative to the
repository): models/tiny-qwen35-gguf's source is synthesised, not committed (tests/cli/server.sh
synthesises it into its work folder). The result is checked against the recorded SHA-256: it is the
converter's file, byte for byte, or an error. Standard library only. Exit 0 on success, 1 on a mismatch or bad input.
"""
import hashlib
import json
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fail(msg):
    print("gguf_rebuild.py: " + msg, file=sys.stderr)
    sys.exit(1)


def read_safetensors(path):
    data = path.read_bytes()
    if len(data) < 8:
        fail(f"{path}: not a safetensors file")
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return header, memoryview(data)[8 + n:]


def as_f32_bytes(dtype, raw):
    """The tensor's values as little-endian f32 bytes (bf16 widened exactly: its 16 bits on top)."""
    if dtype == "F32":
        return bytes(raw)
    if dtype == "BF16":
        out = bytearray(2 * len(raw))
        out[2::4] = raw[0::2]
        out[3::4] = raw[1::2]
        return bytes(out)
    fail(f"source dtype {dtype} is not F32 or BF16")


def main():
    if len(sys.argv) not in (2, 3, 4):
        print(__doc__, file=sys.stderr)
        return 1
    layout_dir = Path(sys.argv[1])
    layout = json.loads((layout_dir / "layout.json").read_text())
    out_path = Path(sys.argv[2]) if len(sys.argv) >= 3 else layout_dir / layout["file"]
    source = Path(sys.argv[3]) if len(sys.argv) == 4 else ROOT / layout["source"]
    header = (layout_dir / "header.bin").read_bytes()
    extra = (layout_dir / "extra.bin").read_bytes()
    if not source.is_file():
        fail(f"no checkpoint {source} (the layout's source)")
    src_header, src_data = read_safetensors(source)
    out = bytearray(layout["size"])
    out[:len(header)] = header
    cache = {}
    for t in layout["tensors"]:
        off, n = t["offset"], t["bytes"]
        if "extra" in t:
            b = extra[t["extra"]:t["extra"] + n]
        else:
            name = t["source"]
            if name not in cache:
                if name not in src_header:
                    fail(f"{source} has no tensor {name}")
                s = src_header[name]
                a, e = s["data_offsets"]
                cache[name] = as_f32_bytes(s["dtype"], src_data[a:e])
            src = cache[name]
            c = t["chunk"] * 4
            b = b"".join(src[start * c:(start + count) * c] for start, count in t["runs"])
        if len(b) != n:
            fail(f"tensor {t['name']}: rebuilt {len(b)} bytes, expected {n}")
        out[off:off + n] = b
    digest = hashlib.sha256(out).hexdigest()
    if digest != layout["sha256"]:
        fail(f"rebuilt {out_path.name} has SHA-256 {digest}, the converter's file had {layout['sha256']} "
             f"(is {source} the checkpoint the layout was recorded from?)")
    tmp = out_path.with_suffix(".tmp")
    tmp.write_bytes(out)
    tmp.replace(out_path)
    print(f"gguf_rebuild.py: {out_path} ({len(out)} bytes, SHA-256 {digest[:16]}..., the converter's file)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
