#!/usr/bin/env python3
"""Builds the tokenizer fixtures of tests/test_tokenizer.cpp with the Hugging Face `tokenizers` package.

Independent check of src/model/tokenizer.cpp (issue 3): small byte-level BPE tokenizers of the
Qwen3.5 kind (Split regex with \\p{M}) and the Qwen2/Qwen3 kind (without) are trained here with the
HF trainer, saved as tokenizer.json, and a fixed list of hard strings is encoded by HF. The C++
tests must reproduce every id exactly.

Outputs (commit them; this script is never needed to build or test):
  tests/fixtures/tokenizer/qwen35/tokenizer.json   merges written as ["a", "b"] pairs
  tests/fixtures/tokenizer/qwen2/tokenizer.json    merges rewritten as "a b" strings (the older form)
  tests/fixtures/tokenizer/flags/tokenizer.json    qwen35 plus added tokens using lstrip/rstrip/
                                                   single_word/normalized=true
  tests/fixtures/tokenizer/expected.json           per tokenizer: text, ids, pre-tokens; invalid UTF-8
  tests/fixtures/tokenizer/README.md

Usage:  python3 tools/make_tokenizer_fixtures.py [--out tests/fixtures/tokenizer]
"""
import argparse
import json
import os
import sys
import unicodedata

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

# Spec model.md §7.1, verbatim.
QWEN35_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
QWEN2_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# Spec §7.1 order; the <|...|> ones are special, the XML-like ones plain added tokens as in Qwen files.
QWEN_ADDED = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>",
]

VOCAB_SIZE = 960  # + 26 added tokens: every id < 1024, the rows of the synthetic test models

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's a classic pangram; we've all seen it.",
    "When a language model degenerates, it repeats the same phrase again and again and again.",
    "Don't panic. DON'T PANIC. I'm sure they'll find the bug; you'd better check the kernels.",
    "We're comparing every layer against a double-precision reference, position by position.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 1000 2024 3.14159 2.71828 65536 1e-6 0x1F",
    "def forward(self, x):\n    h = self.norm(x)\n    return x + self.mlp(h)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\r\nreturn sum;\r\n",
    "if (a && b || !c) { printf(\"%d\\n\", x); }  // comment\n",
    "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 1024, \"hidden_size\": 64}",
    "Le café est très bon. La crème brûlée aussi. Où est la bibliothèque? Déjà vu, naïve façade.",
    "Die Straße ist schön. Grüße aus München! Über den Wolken.",
    "El niño comió por la mañana. ¿Dónde está el baño? ¡Qué bueno!",
    "Tiếng Việt có nhiều dấu thanh: à á ả ã ạ, ằ ắ ẳ ẵ ặ, ề ế ể ễ ệ.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "Быстрая коричневая лиса прыгает через ленивую собаку. Привет, мир!",
    "नमस्ते दुनिया। यह एक परीक्षण वाक्य है। हिन्दी में मात्राएँ होती हैं।",
    "สวัสดีครับ นี่คือประโยคทดสอบ ภาษาไทยมีสระและวรรณยุกต์",
    "שָׁלוֹם עוֹלָם",
    "مَرْحَبًا بِالْعَالَم",
    "你好，世界！这是一个测试句子。模型的输出开始重复，重复，重复。",
    "こんにちは世界。これはテストの文です。カタカナとひらがな。",
    "안녕하세요 세계. 한국어 텍스트입니다.",
    "Emoji: 😀 😃 😄 👍 👍🏽 🎉 ❤️ 👨‍👩‍👧‍👦 🇫🇷 🇩🇪 ✨ 🚀 1️⃣",
    "Math: ∑ ∫ √ ∞ ≈ ≠ ≤ ≥ ± × ÷ α β γ δ ε π σ ω Ω µ ½ ² Ⅻ",
    "Trailing spaces   \nMultiple    spaces\tand\ttabs\n\n\nBlank lines above.",
    "https://example.com/path?query=value&other=1#anchor  someone@example.com",
] * 3

# The hard strings. Escapes keep this file ASCII-readable where the characters would be invisible.
HARD = [
    "", "Hello world", "hello", " hello", "  hello", "hello ", "hello   ", "   ",
    "e\u0301", "cafe\u0301 au lait", "Ame\u0301lie", "A\u030A", "\u212B", "\u212Bngstrom", "\u1E9B\u0323",
    "\uFB01nance", "Tie\u0302\u0301ng Vie\u0323\u0302t", "a\u0308\u0301", "\u0301abc", " \u0301x", "!\u0301",
    "x \u20DD y", "\u0300\u0301\u0302",
    "नमस्ते दुनिया", "क्षत्रिय", "हिन्दी में मात्राएँ", "สวัสดีครับ", "ภาษาไทยมีสระ", "שָׁלוֹם", "مَرْحَبًا",
    "你好，世界！", "日本語のテキストです。", "한국어 텍스트", "\u1100\u1161\u11A8",
    "这是一个非常长的中文句子没有任何标点符号用来测试很长的预分词片段的合并是否正确以及性能是否足够好",
    "😀👍🏽", "👨‍👩‍👧‍👦 family", "🇫🇷🇩🇪", "❤️", "1️⃣ 2️⃣", "a😀b",
    "1234567890", "3.14159", "x=100000000000000000000", "١٢٣٤", "½ ² Ⅻ", "v1.2.3-rc4",
    "\r\n", "\r\n\r\n", "line1\r\nline2\r\n\r\n\r\nline3", "a\n\n\nb", " \n \n", "\n\n  \n  x", "x\r", "\r\r\n\n",
    "a  b   c    d", "\tindented\t\ttext", "col1\tcol2\t", "tab \t space \t ",
    "don't", "DON'T", "I'M HERE", "we'LL", "she's", "it'S", "o'clock", "rock'n'roll", "'s'S'",
    "x'\u017F", "''", "'re're", "you'VE", "I'd", "'", "' s",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n",
    "a<|endoftext|>b", "<|im_start|><|im_end|>", "<|im_end", "<think></think>", "<|im_start|>e\u0301",
    "e<|im_end|>\u0301", "  <|im_end|>  ", "<tool_call>{\"name\": \"f\"}</tool_call>",
    "a\u00A0b", "a\u3000b", "x\u2028y", "\u000Bvt", "\x1C\x1D\x1E\x1F", "\u0085", "zero\u200Bwidth", "a\u2003\u2003b",
    "\x00\x01\x7F", "...!!!???", "-->", " ;;\n\n", "a -- b", "$100", "#hashtag @user", "(a)[b]{c}",
    "def f(x):\n    return x ** 2\n", "if (a && b) { return -1; }\n", "HelloWorld", "\u00C9COLE", "\u0130stanbul",
    "supercalifragilisticexpialidocious", "Ünïcödé wörds", "ǅemal", "ꙮ",
    "The quick brown fox jumps over the lazy dog. It's a classic pangram; we've all seen it.",
]
HARD.append("".join(CORPUS[:26]))  # one long mixed text

FLAGS_EXTRA_STRINGS = [
    "<mask>", "a <mask> b", "a\t<mask>\tb", "x<mask>y", "  <mask>", "<mask>  ",
    "[W]", "a [W] b", "a[W]b", "[W],", "\u00E9[W]", "[W]\u0301", "_[W]", "[W][W]",
    "\u212Bx", "\u00C5x", "A\u030Ax", "\u212Bz", "\u00C5z", "A\u030Az", "<mask><|im_end|>[W]",
]

INVALID_UTF8 = ["ff", "61c3", "61e282", "c0af", "eda080", "f4908080", "80", "e228a1", "f0908d", "616263fe",
                "68656c6c6f20f09f", "e0808f"]


def build(regex, extra_flags=False):
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(CORPUS, trainer=trainer)
    for t in QWEN_ADDED:
        special = t.startswith("<|")
        added = AddedToken(t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special)
        if special:
            tok.add_special_tokens([added])
        else:
            tok.add_tokens([added])
    if extra_flags:
        tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False, special=True)])
        tok.add_tokens([AddedToken("[W]", single_word=True, normalized=False, special=False)])
        # matched after NFC (U+212B ANGSTROM SIGN normalises to U+00C5)
        tok.add_tokens([AddedToken("\u212Bx", normalized=True, special=False)])
        # matched in the raw text only
        tok.add_tokens([AddedToken("\u212Bz", normalized=False, special=False)])
    return tok


def compact_json(obj):
    """tokenizer.json with one vocab entry / merge per line (HF's pretty printer is 4x larger)."""
    out = ["{"]
    items = list(obj.items())
    for k, (key, val) in enumerate(items):
        comma = "," if k + 1 < len(items) else ""
        if key == "model":
            out.append(' "model": {')
            mitems = list(val.items())
            for m, (mk, mv) in enumerate(mitems):
                mcomma = "," if m + 1 < len(mitems) else ""
                if mk == "vocab":
                    out.append('  "vocab": {')
                    vi = list(mv.items())
                    for v, (tk, tid) in enumerate(vi):
                        out.append("   %s: %d%s" % (json.dumps(tk, ensure_ascii=False), tid, "," if v + 1 < len(vi) else ""))
                    out.append("  }" + mcomma)
                elif mk == "merges":
                    out.append('  "merges": [')
                    for v, pair in enumerate(mv):
                        out.append("   %s%s" % (json.dumps(pair, ensure_ascii=False), "," if v + 1 < len(mv) else ""))
                    out.append("  ]" + mcomma)
                else:
                    out.append("  %s: %s%s" % (json.dumps(mk), json.dumps(mv, ensure_ascii=False), mcomma))
            out.append(" }" + comma)
        elif key == "added_tokens":
            out.append(' "added_tokens": [')
            for a, t in enumerate(val):
                out.append("  %s%s" % (json.dumps(t, ensure_ascii=False), "," if a + 1 < len(val) else ""))
            out.append(" ]" + comma)
        else:
            out.append(" %s: %s%s" % (json.dumps(key), json.dumps(val, ensure_ascii=False), comma))
    out.append("}")
    return "\n".join(out) + "\n"


def save(tok, path, merges_as_strings):
    obj = json.loads(tok.to_str())
    # The Python bindings serialise ByteLevel options they ignore; write what the Qwen files have
    # (none of these fields changes the ids).
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    obj["pre_tokenizer"]["pretokenizers"][1] = dict(byte_level)
    obj["post_processor"] = dict(byte_level)
    obj["decoder"] = dict(byte_level)
    obj["model"]["continuing_subword_prefix"] = ""
    obj["model"]["end_of_word_suffix"] = ""
    merges = obj["model"]["merges"]
    if merges_as_strings:
        obj["model"]["merges"] = [m if isinstance(m, str) else m[0] + " " + m[1] for m in merges]
    else:
        obj["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m for m in merges]
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(compact_json(obj))
    return Tokenizer.from_file(path)  # what the tests read, reloaded


def cases(tok, strings):
    out = []
    pre = tok.pre_tokenizer
    for s in strings:
        ids = tok.encode(s, add_special_tokens=True).ids
        entry = {"text": s, "ids": ids}
        if "<" not in s and "[W]" not in s:
            # pre-tokens of the NFC text, byte-level mapped: isolates regex from BPE differences
            entry["pretokens"] = [p for p, _ in pre.pre_tokenize_str(unicodedata.normalize("NFC", s))]
        out.append(entry)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "tokenizer"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)

    t35 = save(build(QWEN35_REGEX), os.path.join(out, "qwen35", "tokenizer.json"), merges_as_strings=False)
    t2 = save(build(QWEN2_REGEX), os.path.join(out, "qwen2", "tokenizer.json"), merges_as_strings=True)
    tf = save(build(QWEN35_REGEX, extra_flags=True), os.path.join(out, "flags", "tokenizer.json"),
              merges_as_strings=False)

    invalid = []
    for h in INVALID_UTF8:
        b = bytes.fromhex(h)
        try:
            b.decode("utf-8")
            raise SystemExit("not invalid: " + h)
        except UnicodeDecodeError as e:
            invalid.append({"hex": h, "offset": e.start})

    expected = {
        "magic": "degenbisect-tokenizer-fixture",
        "version": 1,
        "tokenizers_version": tokenizers.__version__,
        "tokenizers": {
            "qwen35": {"file": "qwen35/tokenizer.json", "cases": cases(t35, HARD)},
            "qwen2": {"file": "qwen2/tokenizer.json", "cases": cases(t2, HARD)},
            "flags": {"file": "flags/tokenizer.json", "cases": cases(tf, FLAGS_EXTRA_STRINGS + HARD[:40])},
        },
        "invalid_utf8": invalid,
    }
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=True, indent=None, separators=(",", ":"))
        f.write("\n")

    readme = f"""# Tokenizer fixtures

Made by `tools/make_tokenizer_fixtures.py` with Hugging Face `tokenizers` {tokenizers.__version__}
(Python {sys.version.split()[0]}). Regenerate with

    pip install tokenizers
    python3 tools/make_tokenizer_fixtures.py

and commit every file of this folder together (the ids in `expected.json` belong to these
`tokenizer.json` files; another `tokenizers` version may train slightly different merges).

- `qwen35/tokenizer.json`: byte-level BPE ({VOCAB_SIZE} ids + the Qwen added tokens) trained with the
  Qwen3.5 Split regex (with `\\p{{M}}`, spec model.md §7.1); merges in the `["a", "b"]` pair form.
- `qwen2/tokenizer.json`: the same with the Qwen2/Qwen3 regex (no `\\p{{M}}`); merges rewritten in the
  older `"a b"` string form.
- `flags/tokenizer.json`: qwen35 plus added tokens exercising the flags: `<mask>` (special,
  lstrip+rstrip), `[W]` (single_word), `\\u212Bx` (normalized=true: matched after NFC), `\\u212Bz`
  (normalized=false).
- `expected.json`: for each tokenizer, the hard strings with the ids HF produces
  (`encode(text).ids`) and, for strings without added tokens, HF's pre-tokens of the NFC text
  (byte-level mapped); `invalid_utf8`: byte strings with the offset Python's strict UTF-8 decoder
  reports (HF cannot take invalid UTF-8 at all; degenbisect must report the same offset).
  Header: magic `degenbisect-tokenizer-fixture`, version 1.

Checked by `tests/test_tokenizer.cpp` (`tokenizer: fixture ids ...`).
"""
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write(readme)
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out) for fn in fns)
    print(f"wrote {out} ({total / 1024:.0f} KiB) with tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
