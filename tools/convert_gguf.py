#!/usr/bin/env python3
"""Converts a degenbisect model directory (HF layout) to GGUF with llama.cpp's own converter.

    python3 tools/convert_gguf.py MODEL_DIR OUT.gguf --outtype f32|bf16|f16|q8_0 [--llama DIR]

--llama is the llama.cpp source tree (default build/llama.cpp/src, made by
scripts/build-llama-cpp.sh). Needs torch and numpy (the converter's requirements).

Only one thing is added to llama.cpp's converter, and only for our own tokenizers: the converter
names a BPE pre-tokenizer by hashing how a fixed test string tokenizes, so a tokenizer trained here
(the Qwen3.5 split pattern, another vocabulary) hashes to something it does not know. When the
tokenizer.json's pre-tokenizer regex is exactly Qwen3.5's, the converter is told the name
"qwen35"; any other tokenizer goes through the converter unchanged (and fails there if unknown).
"""
import argparse
import json
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The split pattern of Qwen3.5's tokenizer.json (kQwen35SplitRegex in src/model/tokenizer.cpp).
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def split_regexes(tok: dict) -> list:
    pre = tok.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre])
    return [p.get("pattern", {}).get("Regex") for p in parts if p.get("type") == "Split"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--outtype", required=True, choices=["f32", "bf16", "f16", "q8_0"])
    ap.add_argument("--llama", default=str(ROOT / "build/llama.cpp/src"))
    a = ap.parse_args()
    llama = Path(a.llama)
    conv = llama / "convert_hf_to_gguf.py"
    if not conv.is_file():
        print(f"convert_gguf.py: no {conv}; run scripts/build-llama-cpp.sh first", file=sys.stderr)
        return 1
    tok = json.loads((Path(a.model_dir) / "tokenizer.json").read_text())
    qwen35_split = split_regexes(tok) == [QWEN35_SPLIT]

    sys.path.insert(0, str(llama))
    sys.path.insert(1, str(llama / "gguf-py"))
    import conversion.base as base  # llama.cpp's converter package

    if qwen35_split:
        known = base.TextModel.get_vocab_base_pre

        def vocab_base_pre(self, tokenizer):
            try:
                return known(self, tokenizer)
            except NotImplementedError:
                print("convert_gguf.py: pre-tokenizer: the Qwen3.5 split pattern, another vocabulary -> qwen35",
                      file=sys.stderr)
                return "qwen35"

        base.TextModel.get_vocab_base_pre = vocab_base_pre
    sys.argv = [str(conv), a.model_dir, "--outfile", a.out, "--outtype", a.outtype]
    runpy.run_path(str(conv), run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
