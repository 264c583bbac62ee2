#!/usr/bin/env python3
"""Tokenizer throughput of Hugging Face `tokenizers`, to put beside `degenbisect tokenize --bench`.

Writes a deterministic mixed text (English, code, numbers, CJK, Devanagari, Cyrillic, emoji,
CR/LF runs) of about --mb megabytes to --text (when that file does not exist yet), then times
HF encode on it. Run our side on the same file:

    python3 tools/bench_tokenizer_hf.py --text /tmp/bench.txt
    degenbisect tokenize --model tests/fixtures/tokenizer/qwen35 --bench /tmp/bench.txt
"""
import argparse
import os
import random
import time

WORDS = ("the of and to in is that it for was on are as with his they at be this from have or by one had "
         "not but what all were when we there can an your which their said if do will each about how up out "
         "them then she many some so these would other into has more her two like him see time could no make "
         "than first been its who now people my made over did down only way find use may water long little "
         "very after words called just where most know model layer token kernel cache sampler attention "
         "degenerate repeat output position gradient tensor precision reference compare bisect").split()
CODE = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) sum += a[i];\n",
        "if (err != nullptr) { return -1; }\n", "x = torch.softmax(scores, dim=-1)\n",
        "{\"key\": [1, 2, 3], \"ok\": true}\n", "#include <vector>\n", "\tcase 3: break;\r\n"]
OTHER = ["你好世界", "模型的输出开始重复", "こんにちは", "नमस्ते दुनिया", "Привет, мир", "café crème",
         "naïve façade", "😀", "👍🏽", "👨‍👩‍👧‍👦", "ℕ ≤ ∞", "DON'T", "it's", "we'll", "\r\n\r\n", "   ", "\t"]


def make_text(mb, seed=1234):
    rng = random.Random(seed)
    parts, size = [], 0
    while size < mb * 1_000_000:
        r = rng.random()
        if r < 0.75:
            s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 15)))
            s = s[0].upper() + s[1:] + rng.choice([". ", ", ", "! ", "? ", ".\n", ";\n"])
        elif r < 0.85:
            s = rng.choice(CODE)
        elif r < 0.92:
            s = str(rng.randint(0, 10 ** rng.randint(1, 12))) + rng.choice([" ", ".", ", ", "\n"])
        else:
            s = rng.choice(OTHER) + " "
        parts.append(s)
        size += len(s.encode("utf-8"))
    return "".join(parts)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default=os.path.join(here, "..", "tests", "fixtures", "tokenizer", "qwen35", "tokenizer.json"))
    ap.add_argument("--text", default="/tmp/degen-bench-text.txt")
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()

    if not os.path.exists(args.text):
        with open(args.text, "w", encoding="utf-8", newline="") as f:
            f.write(make_text(args.mb))
    with open(args.text, encoding="utf-8", newline="") as f:
        text = f.read()
    nbytes = len(text.encode("utf-8"))

    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread, like degenbisect's encode
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(args.tokenizer)
    t0 = time.perf_counter()
    n = len(tok.encode(text).ids)
    cold = time.perf_counter() - t0
    iters, t1 = 0, time.perf_counter()
    while iters < 3 or time.perf_counter() - t1 < args.seconds:
        tok.encode(text)
        iters += 1
    warm = time.perf_counter() - t1
    chunks = [text[i:i + 10000] for i in range(0, len(text), 10000)]
    t2 = time.perf_counter()
    tok.encode_batch(chunks)
    batch = time.perf_counter() - t2
    mb = nbytes / 1e6
    print(f"HF tokenizers {tokenizers.__version__} on {args.text}: {mb:.2f} MB, {n} tokens")
    print(f"encode (one string, one thread): first {mb / cold:.1f} MB/s, then {mb * iters / warm:.1f} MB/s over {iters} passes")
    print(f"encode_batch (10k-character chunks, one thread): {mb / batch:.1f} MB/s")


if __name__ == "__main__":
    main()
