#!/usr/bin/env python3
"""Writes a Hugging Face style tokenizer.json (and a minimal config.json) from the vocabulary of a GGUF file.

    python3 tools/gguf_vocab_to_tokenizer.py [--nfc] VOCAB.gguf OUTDIR

Python 3 standard library only. The GGUF reader is written here from the format description (magic
"GGUF", version, tensor count, metadata key/value pairs of the 13 value types, arrays included); only
the metadata is read, never tensor data, so a multi-gigabyte model file works too (it is memory-mapped).

What is converted: a byte-level BPE vocabulary (tokenizer.ggml.model "gpt2") whose pre-tokenizer
(tokenizer.ggml.pre) is one degenbisect implements, "qwen35" (or "qwen2"). The GGUF keeps the token
strings, their types and the merges; it does not keep the rest of the tokenizer.json pipeline, which
is written as follows:
  normalizer     none: a GGUF records no normalizer and llama.cpp applies none to BPE vocabularies,
                 so the file tokenizes as llama.cpp does. --nfc writes {"type": "NFC"} instead, as the
                 Qwen2/Qwen3 tokenizer.json files on Hugging Face (and as far as we know Qwen3.5's)
                 have it; the two differ only on text that is not in NFC (decomposed accents: "e" +
                 U+0301 and the like)
  pre_tokenizer  Split (the Qwen3.5 or Qwen2 regex, Isolated) then ByteLevel (no prefix space, no regex)
  model          BPE; vocab = the tokens of type normal (1), unknown (2) and byte (6); merges in order
  added_tokens   the tokens of type control (3, special) and user defined (4, not special), matched
                 in the raw text (normalized false), no strip flags
  decoder        ByteLevel
The "[PAD<id>]" fillers llama.cpp's converter writes for ids the tokenizer does not define (type unused
(5), or user defined (4) in older files) are left out, as are other unused tokens: their ids are holes,
as in the original tokenizer.json. config.json gets model_type "qwen3_5_text" (or "qwen2") and
vocab_size = the number of GGUF tokens (or <arch>.vocab_size when larger).

Exit 0 on success, 1 with a message (what was expected, what was found) when the file is not GGUF,
is truncated, has an unsupported version, lacks tokenizer.ggml.tokens, or holds a vocabulary of
another kind; 2 on a usage error.
"""
import json
import mmap
import os
import struct
import sys

# The Split patterns of the Qwen tokenizer.json files (kQwen35SplitRegex / kQwen2SplitRegex in
# src/model/tokenizer.cpp; the loader accepts exactly these strings).
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# tokenizer.ggml.pre -> (Split regex, model_type for config.json)
PRE_TOKENIZERS = {"qwen35": (QWEN35_SPLIT, "qwen3_5_text"), "qwen2": (QWEN2_SPLIT, "qwen2")}

SUPPORTED_VERSIONS = (2, 3)

# GGUF metadata value types (the numbering of the GGUF format) and the struct codes of the scalar ones
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
SCALAR = {T_UINT8: "B", T_INT8: "b", T_UINT16: "H", T_INT16: "h", T_UINT32: "I", T_INT32: "i",
          T_FLOAT32: "f", T_BOOL: "?", T_UINT64: "Q", T_INT64: "q", T_FLOAT64: "d"}
TYPE_NAMES = {T_UINT8: "uint8", T_INT8: "int8", T_UINT16: "uint16", T_INT16: "int16", T_UINT32: "uint32",
              T_INT32: "int32", T_FLOAT32: "float32", T_BOOL: "bool", T_STRING: "string", T_ARRAY: "array",
              T_UINT64: "uint64", T_INT64: "int64", T_FLOAT64: "float64"}

# llama.cpp token types
TT_NORMAL, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE = 1, 2, 3, 4, 5, 6


class ConvertError(Exception):
    """A problem with the input; the message says what was expected and what was found."""


class Reader:
    """Bounds-checked little- or big-endian reads over a bytes-like buffer."""

    def __init__(self, buf, path):
        self.buf = buf
        self.size = len(buf)
        self.pos = 0
        self.path = path
        self.endian = "<"

    def need(self, n, what):
        if n > self.size - self.pos:
            raise ConvertError(
                f"{self.path}: truncated GGUF file: expected {n} more bytes for {what} at byte offset "
                f"{self.pos}, but the file ends at {self.size} (only {self.size - self.pos} left)")

    def unpack(self, code, what, count=1):
        fmt = f"{self.endian}{count}{code}"
        n = struct.calcsize(fmt)
        self.need(n, what)
        vals = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return vals

    def scalar(self, code, what):
        return self.unpack(code, what)[0]

    def string(self, what):
        n = self.scalar("Q", f"the length of {what}")
        self.need(n, f"{what} ({n} bytes)")
        raw = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConvertError(f"{self.path}: {what} is not valid UTF-8 ({e}); expected a UTF-8 string")

    def value(self, vtype, what, depth=0):
        if vtype in SCALAR:
            return self.scalar(SCALAR[vtype], what)
        if vtype == T_STRING:
            return self.string(what)
        if vtype == T_ARRAY:
            if depth > 8:
                raise ConvertError(f"{self.path}: {what}: arrays nested deeper than 8 levels; expected a sane GGUF")
            etype = self.scalar("I", f"the element type of {what}")
            count = self.scalar("Q", f"the element count of {what}")
            if etype in SCALAR:
                # count * element size must fit in the file (checked before allocating anything)
                self.need(count * struct.calcsize(self.endian + SCALAR[etype]),
                          f"{count} {TYPE_NAMES[etype]} elements of {what}")
                return list(self.unpack(SCALAR[etype], what, count))
            if etype == T_STRING:
                self.need(count * 8, f"{count} string elements of {what} (at least 8 bytes each)")
                return [self.string(f"{what}[{i}]") for i in range(count)]
            if etype == T_ARRAY:
                self.need(count * 12, f"{count} array elements of {what} (at least 12 bytes each)")
                return [self.value(T_ARRAY, f"{what}[{i}]", depth + 1) for i in range(count)]
            raise ConvertError(f"{self.path}: {what}: unknown array element type {etype}; "
                               f"expected one of 0..12 ({', '.join(TYPE_NAMES.values())})")
        raise ConvertError(f"{self.path}: {what}: unknown value type {vtype} at byte offset {self.pos - 4}; "
                           f"expected one of 0..12 ({', '.join(TYPE_NAMES.values())})")


def read_gguf_metadata(path):
    """Returns (version, tensor_count, {key: value}) of a GGUF file."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise ConvertError(f"cannot open {path}: {e.strerror}; expected a readable GGUF file")
    with f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise ConvertError(f"{path}: empty file; expected a GGUF file (starting with the magic \"GGUF\")")
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            buf = f.read()
        try:
            return parse_gguf_metadata(buf, path)
        finally:
            if isinstance(buf, mmap.mmap):
                buf.close()


def parse_gguf_metadata(buf, path):
    r = Reader(buf, path)
    magic = bytes(buf[:4])
    if magic != b"GGUF":
        raise ConvertError(f"{path}: not a GGUF file: the first bytes are {magic!r}; expected the magic b'GGUF'")
    r.pos = 4
    version = r.scalar("I", "the version")
    if version not in SUPPORTED_VERSIONS:
        swapped = struct.unpack(">I", struct.pack("<I", version))[0]
        if swapped in SUPPORTED_VERSIONS:
            r.endian = ">"  # a big-endian GGUF: the same layout, byte-swapped numbers
            version = swapped
        elif version == 1:
            raise ConvertError(f"{path}: GGUF version 1 (32-bit counts, obsolete) is not supported; "
                               f"expected version {' or '.join(map(str, SUPPORTED_VERSIONS))}")
        else:
            raise ConvertError(f"{path}: unsupported GGUF version {version}; "
                               f"expected version {' or '.join(map(str, SUPPORTED_VERSIONS))}")
    tensor_count = r.scalar("Q", "the tensor count")
    kv_count = r.scalar("Q", "the metadata key/value count")
    # every pair takes at least 12 bytes (key length, value type); a wild count is a broken file
    r.need(kv_count * 12, f"{kv_count} metadata key/value pairs")
    meta = {}
    for i in range(kv_count):
        key = r.string(f"the key of metadata pair {i}")
        vtype = r.scalar("I", f"the value type of '{key}'")
        meta[key] = (vtype, r.value(vtype, f"the value of '{key}'"))
    return version, tensor_count, meta


def get(meta, path, key, vtype, elem=None, required=True):
    """The value of key, checked to have the given GGUF type (and array element type)."""
    if key not in meta:
        if required:
            raise ConvertError(f"{path}: no metadata key '{key}'; expected a GGUF with a tokenizer "
                               f"(a vocab-only or model GGUF holding {key})")
        return None
    t, v = meta[key]
    want = TYPE_NAMES[vtype] + (f" of {TYPE_NAMES[elem]}" if elem is not None else "")
    ok = t == vtype
    if ok and elem is not None:
        ok = check_elems(v, elem)
    if not ok:
        found = TYPE_NAMES.get(t, str(t))
        raise ConvertError(f"{path}: metadata key '{key}' has type {found}; expected {want}")
    return v


def check_elems(v, elem):
    if elem == T_STRING:
        return all(isinstance(x, str) for x in v)
    if elem in (T_FLOAT32, T_FLOAT64):
        return all(isinstance(x, float) for x in v)
    return all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def convert(gguf_path, outdir, nfc=False):
    version, _, meta = read_gguf_metadata(gguf_path)
    model = get(meta, gguf_path, "tokenizer.ggml.model", T_STRING, required=False)
    if model is not None and model != "gpt2":
        raise ConvertError(f"{gguf_path}: tokenizer.ggml.model is \"{model}\"; expected \"gpt2\" (byte-level BPE, "
                           f"the only kind degenbisect's tokenizer implements)")
    tokens = get(meta, gguf_path, "tokenizer.ggml.tokens", T_ARRAY, T_STRING)
    if model is None:
        raise ConvertError(f"{gguf_path}: no metadata key 'tokenizer.ggml.model'; expected \"gpt2\" (byte-level BPE)")
    pre = get(meta, gguf_path, "tokenizer.ggml.pre", T_STRING, required=False)
    if pre not in PRE_TOKENIZERS:
        raise ConvertError(f"{gguf_path}: tokenizer.ggml.pre is {json.dumps(pre)}; expected one of "
                           f"{', '.join(json.dumps(k) for k in PRE_TOKENIZERS)} (the pre-tokenizers degenbisect implements)")
    split_regex, model_type = PRE_TOKENIZERS[pre]
    n = len(tokens)
    if n == 0:
        raise ConvertError(f"{gguf_path}: tokenizer.ggml.tokens is empty; expected the vocabulary")
    types = get(meta, gguf_path, "tokenizer.ggml.token_type", T_ARRAY, T_INT32, required=False)
    if types is None:
        types = [TT_NORMAL] * n
    if len(types) != n:
        raise ConvertError(f"{gguf_path}: tokenizer.ggml.token_type has {len(types)} entries; expected one per "
                           f"token ({n})")
    merges = get(meta, gguf_path, "tokenizer.ggml.merges", T_ARRAY, T_STRING)

    vocab = {}
    added = []
    counts = {}
    n_pad = 0
    for i, (tok, tt) in enumerate(zip(tokens, types)):
        counts[tt] = counts.get(tt, 0) + 1
        if tt in (TT_USER_DEFINED, TT_UNUSED) and tok == f"[PAD{i}]":
            n_pad += 1
            continue
        if tt in (TT_NORMAL, TT_UNKNOWN, TT_BYTE):
            if tok in vocab:
                raise ConvertError(f"{gguf_path}: token {json.dumps(tok)} appears twice (ids {vocab[tok]} and {i}); "
                                   f"expected unique token strings")
            vocab[tok] = i
        elif tt in (TT_CONTROL, TT_USER_DEFINED):
            if tok == "":
                raise ConvertError(f"{gguf_path}: token id {i} (type {tt}) is empty; expected the added token's text")
            added.append({"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": tt == TT_CONTROL})
        elif tt == TT_UNUSED:
            pass
        else:
            raise ConvertError(f"{gguf_path}: token id {i} has type {tt}; expected 1..6 (normal, unknown, control, "
                               f"user defined, unused, byte)")

    pairs = []
    for k, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ConvertError(f"{gguf_path}: tokenizer.ggml.merges[{k}] is {json.dumps(m)}; expected two tokens "
                               f"separated by one space")
        pairs.append(parts)

    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"} if nfc else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": split_regex}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": pairs},
    }
    arch = get(meta, gguf_path, "general.architecture", T_STRING, required=False)
    vocab_size = n
    if arch is not None and f"{arch}.vocab_size" in meta:
        t, v = meta[f"{arch}.vocab_size"]
        if t in SCALAR and isinstance(v, int) and v > vocab_size:
            vocab_size = v
    config = {"model_type": model_type, "vocab_size": vocab_size}

    try:
        os.makedirs(outdir, exist_ok=True)
        with open(os.path.join(outdir, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer, f, ensure_ascii=False)
        with open(os.path.join(outdir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
    except OSError as e:
        raise ConvertError(f"cannot write into {outdir}: {e.strerror}; expected a writable directory")

    names = {TT_NORMAL: "normal", TT_UNKNOWN: "unknown", TT_CONTROL: "control", TT_USER_DEFINED: "user defined",
             TT_UNUSED: "unused", TT_BYTE: "byte"}
    by_type = ", ".join(f"{counts[t]} {names[t]}" for t in sorted(counts))
    print(f"{gguf_path}: GGUF v{version}, model gpt2, pre {pre}: {n} tokens ({by_type}), {len(pairs)} merges")
    print(f"wrote {os.path.join(outdir, 'tokenizer.json')} (vocab {len(vocab)}, added {len(added)}, "
          f"{n_pad} [PAD] fillers left out, normalizer {'NFC' if nfc else 'none'}) and config.json "
          f"(vocab_size {vocab_size})")


USAGE = "usage: python3 tools/gguf_vocab_to_tokenizer.py [--nfc] VOCAB.gguf OUTDIR\n"


def main(argv):
    args = argv[1:]
    if any(a in ("-h", "--help") for a in args):
        sys.stdout.write(__doc__)
        return 0
    nfc = "--nfc" in args
    args = [a for a in args if a != "--nfc"]
    unknown = [a for a in args if a.startswith("--")]
    if unknown or len(args) != 2:
        why = f"unknown option {unknown[0]}" if unknown else f"expected 2 arguments, got {len(args)}"
        sys.stderr.write(f"gguf_vocab_to_tokenizer: {why}\n{USAGE}")
        return 2
    try:
        convert(args[0], args[1], nfc=nfc)
    except ConvertError as e:
        sys.stderr.write(f"gguf_vocab_to_tokenizer: error: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
