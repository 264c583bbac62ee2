// compare --dump: judge another engine's teacher-forced run, written as a dump (docs/dump-format.md:
// one safetensors file per case, the engine's named intermediates over the golden token sequence and
// its logits at every position), against a golden record, with the same result, table, JSON, JUnit
// and exit codes as compare (judge/result.h).
//
// What a dump can give: the engine's own forward pass over the golden tokens, once (prefill). So:
//  - logits: KLD / top-1 / Δp against the record's top-K at every position, judged against the
//    record's KLD floor of the chosen class (metrics.md §2);
//  - layers: drift_L (metrics.md §3) of l_out-L. The isolated error needs golden inputs injected
//    into the engine, which a dump cannot do, so drift is judged against the drift of a known-good
//    run of the same class measured now on our engine (fp32 class: the fp64 reference; bf16 class:
//    the bf16 emulation): layer L passes when drift_L <= k·drift_floor_L + eps. A bug's drift jumps
//    at its layer; a correct engine's drift grows with depth as the known-good run's does.
//  - step: within the first layer over its floor, every mapped step of the engine (dump_names())
//    against the same step of the reference over the same tokens, judged against the known-good
//    run's error at that step: the first step over its floor is named.
// A dump in decode mode (metadata `mode: decode`, llama-dump --decode: the prompt in one batch, then
// one token per batch) is judged as the record's decode mode: its logits against the record's decode
// KLD floor, and the known-good and reference runs decode the same way (prompt, then a token per
// forward), so a bug in the state carried across calls shows in the layers and steps it enters. The
// figures go to the decode columns (mode index 1).
// Free-running generation is not in a dump; a server run gives it (issue: compare --server).
#pragma once
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "judge/result.h"
#include "engine/trace.h"
#include "util/dtype.h"

namespace degen {

class SafetensorsFile;

// How an engine's per-head tensor is laid out against ours (spec model.md §4.7, grouped value heads
// [K0v0 K0v1 .. K1v0 ..]): llama.cpp's converter reorders the value heads of every Gated DeltaNet
// tensor to tiled order [K0v0 K1v0 .. K0v1 ..] for ggml's broadcast (convert_hf_to_gguf.py,
// _LinearAttentionVReorderBase). vheads: columns [offset, offset + n_v·block) of each row are
// value heads of `block` columns each, in tiled order.
enum class HeadOrder : uint8_t { same, vheads_tiled };

struct DumpName {
  char kind;              // 'G' Gated DeltaNet layer, 'A' attention layer, '*' both, 'M' whole model
  const char* engine;     // the engine's name (without -L)
  Step step;              // ours
  HeadOrder order;
  int offset_keys;        // vheads: the offset is this many times n_k·d_k (gdn_qkv, gdn_conv: 2)
  bool block_is_dv;       // vheads: block d_v (else 1: one column per head)
  const char* note;
  bool scale_q = false;   // ours is the engine's times 1/sqrt(d_k) (the query scale folded into gdn_q)
};

// The llama.cpp names (its qwen35 graph, models/qwen35.cpp and models/delta-net-base.cpp of the
// version scripts/build-llama-cpp.sh builds) onto our steps, in forward order per layer kind.
const std::vector<DumpName>& llama_cpp_dump_names();
// Our own names (engine/trace.h), for an engine whose dump writer names its tensors as we do (the
// transformers hook script, tools/hf_dump_hooks.py): every step of trace_steps() as itself.
const std::vector<DumpName>& degenbisect_dump_names();
// The table of a dump's `names` metadata; InputError for an unknown one.
const std::vector<DumpName>& dump_names(const std::string& names);

// One dump tensor as [rows, cols] floats: rows are the positions, cols the rest flattened (in our
// column order once mapped).
struct DumpRows {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;  // [rows, cols]
};

// The dtypes a dump's tensors may have (docs/dump-format.md): F32, F16, BF16.
bool dump_dtype_ok(DType t);

// One case's dump file, opened and checked against what the record and the model say it holds
// (docs/dump-format.md) before any value is used: the metadata (format, names, case, tokens), the
// logits [T, V], and every tensor of the names table at every layer it applies to: a float dtype
// (dump_dtype_ok), T rows, and the hidden size H where ours is [T, H] (the embedding, l_out-L).
// SafetensorsFile::open has checked every tensor's bytes against the file, so what is read here is
// never larger than the file. InputError (exit 128) names the file, the tensor, what was expected
// and what was found. The values themselves are the engine's output, judged, not refused: NaN,
// +inf or logits beyond metrics::kMaxLogitMagnitude make the verdict bad (metrics.h).
class DumpReader {
 public:
  // cfg must outlive the reader.
  DumpReader(const std::filesystem::path& file, const std::string& case_id, int64_t tokens, const ModelConfig& cfg);
  ~DumpReader();
  DumpReader(const DumpReader&) = delete;
  DumpReader& operator=(const DumpReader&) = delete;

  const std::filesystem::path& path() const;
  const std::vector<DumpName>& names() const { return *names_; }
  // 0: prefill (one batch; the default), 1: decode (metadata mode "decode": the first
  // prompt_tokens() in one batch, then one token per batch).
  int mode() const { return mode_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  std::vector<float> logits() const;  // [T, V] fp32
  // The engine's tensor of entry `n` at `layer` (-1: a whole-model entry) in our layout (value heads
  // untiled, the query scaled); empty when the dump does not hold it.
  DumpRows mapped(const DumpName& n, int layer) const;

 private:
  DumpRows rows(const std::string& name) const;
  std::unique_ptr<SafetensorsFile> f_;
  const ModelConfig& cfg_;
  const std::vector<DumpName>* names_ = nullptr;
  int64_t T_ = 0;
  int mode_ = 0;
  int64_t prompt_tokens_ = 0;
};

// The common options (judge/result.h; cases: only these, empty: every case with a dump file) and the dump's.
struct DumpCompareOptions : CommonCompareOptions {
  std::string dir;                   // the dump folder
  FloorClass fclass = FloorClass::fp32;
  // An engine class without floors in the record (EngineClass::measured, e.g. q8_0): the known-good
  // run is our engine under this configuration, and its mean KLD is the logits' floor.
  std::optional<RunConfig> measured_class;
  std::string class_name;
};

// InputError (exit 128): no dump for a selected case, a dump of another format, sequence or
// vocabulary (another model's), a tensor of the wrong dtype or shape (DumpReader).
CompareResult compare_dump(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const DumpCompareOptions& o,
                           const BackendFactory& factory, std::FILE* progress = nullptr);

}  // namespace degen
