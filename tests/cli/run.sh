# `run`: greedy generation through the CLI reproduces HF's cached greedy continuation on an HF
# fixture (tests/fixtures/hf/qwen35-dense: input_ids -> gen_ids), text prompts with the chat template
# on a synthetic model, and the error paths: bad --config (128), unsupported backend (125), NaN in
# a tensor (128, named), a prompt longer than the maximum context (128, case named).
source "$(dirname "$0")/lib.bash"
fx="$SRC/tests/fixtures/hf/qwen35-dense"
ids=350,151,413,499,224,470,146,82,260,473,366,218,63,428,258,504,86,372,379,362,103,365,122,400,68,204,364,416,287,320,443,241,46,298,6,87,211,328,355,482,74,37,467,84,402,311,458,153,195,222,370,276,34,245,310,40,64,393,21,259,362,427,287,359,391,471,460,410,351,437
hf_gen=471,38,106,58,120,406,310,121

for cfg in "backend=cpu" "gdn=recurrent" "precision=fp64"; do
  expect_exit 0 "$BIN" run --model "$fx" --tokens "$ids" --max-new-tokens 8 --config "$cfg"
  expect_out "[ids] $hf_gen"
  expect_out "8 tokens (max tokens)"
  expect_out "tok/s"
done

# Bad configuration: unknown key or value -> 128; a backend `run` cannot honour -> 125.
expect_exit 128 "$BIN" run --model "$fx" --tokens 1,2 --config colour=blue
expect_out "unknown key 'colour'"
expect_exit 128 "$BIN" run --model "$fx" --tokens 1,2 --config gdn=fast
expect_out "expected one of chunked, recurrent"
expect_exit 128 "$BIN" run --model "$fx" --tokens 1,2 --config temp=-1
expect_exit 125 "$BIN" run --model "$fx" --tokens 1,2 --config backend=cuda,precision=bf16  # untestable with or without a GPU
expect_exit 128 "$BIN" run --model "$fx" --tokens 1,x
expect_exit 128 "$BIN" run --model "$fx" --tokens 1,600
expect_out "vocab_size"
expect_exit 128 "$BIN" run --model "$fx" --prompt hello
expect_out "no tokenizer.json"

# Prompt longer than max_position_embeddings (4096): error naming the case.
long=$(printf '1,%.0s' $(seq 1 4097)); long=${long%,}
expect_exit 128 "$BIN" run --model "$fx" --tokens "$long"
expect_out "case 'tokens'"
expect_out "max_position_embeddings = 4096"

# --check-weights: clean, then a NaN written into the first tensor of the data section (lm_head.weight).
expect_exit 0 "$BIN" run --model "$fx" --check-weights
expect_out "all 109 tensors finite"
bad="$WORK/nan"
cp -r "$fx" "$bad"
hlen=$(od -An -tu8 -N8 "$bad/model.safetensors" | tr -d ' ')
printf '\x00\x00\xc0\x7f' | dd of="$bad/model.safetensors" bs=1 seek=$((8 + hlen + 40)) conv=notrunc status=none
expect_exit 128 "$BIN" run --model "$bad" --check-weights
expect_out "lm_head.weight"
expect_out "element 10 is nan"
expect_exit 128 "$BIN" run --model "$bad" --tokens 1,2,3   # found while generating, named the same way
expect_out "lm_head.weight"

# Text prompts through the tokenizer and chat template of a synthetic model; a batch of two prompts.
m="$WORK/tiny"
expect_exit 0 "$BIN" synth --preset tiny-qwen35 --out "$m"
expect_exit 0 "$BIN" run --model "$m" --prompt "What is 2+2?" --chat --max-new-tokens 5
expect_out "[thinking]"
expect_out "[answer]"
expect_out "5 tokens"
expect_exit 0 "$BIN" run --model "$m" --prompt "Hi" --prompt "Hello there" --max-new-tokens 4 --config temp=0.7,top_p=0.8,top_k=20,seed=1
expect_out "case 'prompt 1'"
expect_out "total: 8 generated tokens"
