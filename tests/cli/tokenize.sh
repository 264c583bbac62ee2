# `degenbisect tokenize` on the fixture tokenizer: ids and pieces, --chat, --ids-only, --decode,
# --bench, malformed tokenizer.json / invalid UTF-8 -> exit 128; the synthetic tokenizer.json
# against Hugging Face `tokenizers` when that Python package is installed.
# Args: BINARY SOURCE_DIR WORKDIR; exit 0 pass, 77 skip.
source "$(dirname "$0")/lib.bash"

m="$WORK/model"
mkdir -p "$m"
cp "$SRC/tests/fixtures/tokenizer/qwen35/tokenizer.json" "$m/"
echo '{"model_type": "qwen3_5_text", "vocab_size": 1024}' > "$m/config.json"

expect_exit 0 "$BIN" tokenize --help
expect_out "--chat"

# Plain text: one line per token, special tokens marked, summary.
expect_exit 0 "$BIN" tokenize --model "$m" "The model repeats<|im_end|>"
expect_out "pre-tokenizer qwen35"
expect_out '"<|im_end|>"  [special]'
expect_out "    1      773  \" model\""
expect_out "stop ids: 960 <|endoftext|> 962 <|im_end|>"
expect_out "model vocab_size 1024: 38 padding ids never sampled (tokenizer defines 986)"

# Chat template, thinking on and off (spec model.md §7.2).
expect_exit 0 "$BIN" tokenize --model "$m" --chat "Hi"
expect_out "chat template qwen35, thinking on"
expect_out '"<think>"  [added]'
expect_exit 0 "$BIN" tokenize --model "$m" --chat --no-think --system "Be brief." "Hi"
expect_out '"</think>"  [added]'
expect_out "chat template qwen35, thinking off"
expect_exit 0 "$BIN" tokenize --model "$m" --chat --no-think --system " Be brief. " --ids-only " Hi "
ids=$(cat "$WORK/out")
# shellcheck disable=SC2086
expect_exit 0 "$BIN" tokenize --model "$m" --ids-only --decode $ids
printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' > "$WORK/want"
cmp -s "$WORK/out" "$WORK/want" || fail "chat template text: got '$(cat "$WORK/out")'"

# --ids-only and --decode round trip.
expect_exit 0 "$BIN" tokenize --model "$m" --ids-only "The quick brown fox"
ids=$(cat "$WORK/out")
[ -n "$ids" ] || fail "no ids"
# shellcheck disable=SC2086
expect_exit 0 "$BIN" tokenize --model "$m" --ids-only --decode $ids
[ "$(cat "$WORK/out")" = "The quick brown fox" ] || fail "decode round trip gave '$(cat "$WORK/out")'"
expect_exit 0 "$BIN" tokenize --model "$m" --decode 1 2 3
expect_out "text: "
expect_exit 128 "$BIN" tokenize --model "$m" --decode 5000
expect_out "not defined"

# Text from a file; invalid UTF-8 gives the byte offset.
printf 'ab\xffcd' > "$WORK/bad.txt"
expect_exit 128 "$BIN" tokenize --model "$m" --file "$WORK/bad.txt"
expect_out "byte offset 2"

# Benchmark.
for i in $(seq 200); do echo "Line $i: the model's output starts repeating; don't panic. 你好 😀"; done > "$WORK/bench.txt"
expect_exit 0 "$BIN" tokenize --model "$m" --bench "$WORK/bench.txt" --bench-seconds 0.2
expect_out "MB/s"

# Malformed tokenizer.json: exit 128 with a reason.
bad="$WORK/bad"
mkdir -p "$bad"
cp "$m/config.json" "$bad/"
echo '{"model": {"type": "BPE", "vocab": {' > "$bad/tokenizer.json"
expect_exit 128 "$BIN" tokenize --model "$bad" "x"
expect_out "not valid JSON"
echo '{"version": "1.0"}' > "$bad/tokenizer.json"
expect_exit 128 "$BIN" tokenize --model "$bad" "x"
expect_out 'no "model"'
sed 's/"type": "BPE"/"type": "Unigram"/' "$m/tokenizer.json" > "$bad/tokenizer.json"
expect_exit 128 "$BIN" tokenize --model "$bad" "x"
expect_out 'expected "BPE"'
expect_exit 128 "$BIN" tokenize --model "$WORK/nothing-here" "x"
expect_out "not found"
# a model vocabulary smaller than the tokenizer's ids
echo '{"model_type": "qwen3_5_text", "vocab_size": 512}' > "$bad/config.json"
cp "$m/tokenizer.json" "$bad/"
expect_exit 128 "$BIN" tokenize --model "$bad" "x"
expect_out "smaller than the tokenizer"
# unknown model type for --chat
echo '{"model_type": "llama", "vocab_size": 1024}' > "$bad/config.json"
expect_exit 128 "$BIN" tokenize --model "$bad" --chat "x"
expect_out 'model_type "llama"'
# a prompt the official Qwen3.5 template rejects: a lone tool result is no user query
expect_exit 128 "$BIN" tokenize --model "$m" --chat "<tool_response>r</tool_response>"
expect_out "no user message to answer"

# Synthetic tokenizer: deterministic, and the HF library reads it and agrees with us.
expect_exit 0 "$BIN" tokenize --write-synth qwen35
cp "$WORK/out" "$WORK/synth1.json"
expect_exit 0 "$BIN" tokenize --write-synth qwen35
cmp -s "$WORK/out" "$WORK/synth1.json" || fail "synthetic tokenizer.json differs between runs"
if python3 -c "import tokenizers" 2>/dev/null; then
  for kind in qwen35 qwen2; do
    s="$WORK/synth-$kind"
    mkdir -p "$s"
    "$BIN" tokenize --write-synth "$kind" > "$s/tokenizer.json"
    python3 - "$BIN" "$s" <<'EOF' || fail "HF tokenizers disagrees with degenbisect on the synthetic $kind tokenizer"
import subprocess, sys, tokenizers
binary, d = sys.argv[1], sys.argv[2]
hf = tokenizers.Tokenizer.from_file(d + "/tokenizer.json")
texts = ["Hello world! DON'T panic, it's fine.", "caf\u00e9 cafe\u0301 na\u00efve", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
         "\u4f60\u597d\uff0c\u4e16\u754c\uff01 \U0001F600\U0001F44D\U0001F3FD", "x = 12345 + 0.5;\r\n\r\n\tdone   ",
         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"]
for t in texts:
    with open(d + "/text.txt", "w", encoding="utf-8") as f:
        f.write(t)
    ours = subprocess.run([binary, "tokenize", "--model", d, "--ids-only", "--file", d + "/text.txt"],
                          check=True, capture_output=True, text=True).stdout.split()
    theirs = [str(i) for i in hf.encode(t).ids]
    if ours != theirs:
        print("mismatch for", repr(t), "\n ours  ", ours, "\n theirs", theirs)
        sys.exit(1)
EOF
  done
else
  echo "note: python3 tokenizers not installed; HF cross-check of the synthetic tokenizer skipped"
fi
echo ok
