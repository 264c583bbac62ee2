// RunConfig: one configuration of the toggles of DESIGN.md §5, parsed from "key=value,key=value"
// and printed back canonically (the canonical string names sweep cells and report rows).
// Layer-scopable toggles take a scope: "ssm_dtype=bf16@17", "@12-19", "@linear", "@full",
// several joined with '+': "fault=rope-interleaved@3+7". A later entry for the same key overrides
// an earlier one on the layers they share.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/sampler.h"
#include "engine/toggles.h"
#include "model/config.h"
#include "util/dtype.h"

namespace degen {

enum class BackendKind : uint8_t { cpu, cuda };
// cpu only: ref = golden fp32 (fp64 reductions); fp64 = everything double; bf16 = GPU storage emulation;
// q8_0 = ggml's Q8_0 emulation: every matrix and every matrix product's input quantised in blocks of
// 32 with an fp16 scale (as llama.cpp runs a Q8_0 GGUF on the CPU), fp32 otherwise.
enum class Precision : uint8_t { ref, fp64, bf16, q8_0 };
// AttnAlgo lives in engine/backend.h (the backend honours it).
// one: each prompt alone; all: consecutive prompts with the same settings prefilled and decoded
// together; padded (batch=N): groups of N decoded in steps of exactly N rows, padding rows filling
// the places of missing or finished sequences, each row with its own state slot (engine/serving.h).
enum class BatchMode : uint8_t { one, all, padded };
// prefix_cache=on: the block size (tokens) of the prefix cache's state snapshots.
inline constexpr int kPrefixBlockDefault = 8;
// tp=N: the most tensor-parallel ranks a configuration may ask for.
inline constexpr int kMaxTp = 64;
// gemm (cuda only): the matrix-vector kernel up to 8 rows and cuBLAS above, cuBLAS always, or the plain
// tiled kernel. Its words (auto, cublas, simple) are the toggle registry's (engine/toggles.cpp); the
// CUDA backend maps it onto its own GemmKind (src/cuda/matmul.cpp).
enum class GemmMode : uint8_t { automatic, cublas, simple };

// A set of layers. Empty `parts` with all=true means every layer.
struct LayerScope {
  struct Range { int a = 0, b = 0; };  // inclusive
  bool all = true;
  bool linear = false;   // every GDN layer
  bool full = false;     // every full-attention layer
  std::vector<Range> ranges;
  bool contains(int layer, const ModelConfig* cfg) const;  // cfg needed for linear/full
  std::string str() const;  // "" for all, else "@..." canonical (sorted, merged ranges)
  static LayerScope parse(const std::string& text, const std::string& key);  // text after '@'
  static LayerScope of_layers(const std::vector<int>& layers);
  // Layers in [0, n) the scope selects.
  std::vector<int> layers(int n, const ModelConfig* cfg) const;
};

template <typename T>
struct ScopedEntry {
  T value;
  LayerScope scope;
};

// A toggle whose value may differ per layer: default plus ordered overrides.
template <typename T>
struct Scoped {
  T base;
  std::vector<ScopedEntry<T>> overrides;  // applied in order; the last one containing a layer wins
  T at(int layer, const ModelConfig* cfg) const {
    T v = base;
    for (const auto& e : overrides)
      if (e.scope.contains(layer, cfg)) v = e.value;
    return v;
  }
  bool uniform() const { return overrides.empty(); }
};

struct FaultSpec {
  std::string name;   // a fault of the catalogue (src/engine/faults.h)
  LayerScope scope;   // layers it applies to (all applicable layers when unscoped)
};

struct RunConfig {
  BackendKind backend = BackendKind::cpu;
  Precision precision = Precision::ref;
  // precision given explicitly: on backend=cuda, precision=ref asks for the fp32 reference on the
  // GPU (cuda_reference()); unset is the bf16 GPU path. On the CPU an explicit ref is the default.
  bool precision_set = false;
  Scoped<AttnAlgo> attn{AttnAlgo::naive, {}};
  Scoped<GdnAlgo> gdn{GdnAlgo::chunked, {}};
  Scoped<DType> ssm_dtype{DType::f32, {}};   // storage of the recurrent state between steps
  bool ssm_dtype_set = false;                // false: the checkpoint's mamba_ssm_dtype (else fp32)
  Scoped<DType> conv_dtype{DType::f32, {}};  // storage of the conv window (precision=bf16 default: bf16)
  bool conv_dtype_set = false;
  Scoped<DType> kv_dtype{DType::bf16, {}};   // KV cache storage (bf16 or f8_e4m3)
  int mtp = 0;                               // MTP draft tokens per step, 0 = off
  std::optional<bool> graphs;                // cuda only; unset = off
  std::optional<GemmMode> gemm;              // cuda only; unset = auto (prints nothing, gemm=auto prints)
  int tp = 1;
  BatchMode batch = BatchMode::one;
  int batch_rows = 0;                        // batch=N: rows of every decode step (BatchMode::padded)
  // Serving toggles (engine/serving.h): the prompt prefilled in chunks of this many tokens (0: one
  // call), and the prefix cache's block size in tokens (0: no prefix cache).
  int prefill_chunk = 0;
  int prefix_cache = 0;
  SamplingParams sampling;                   // temp, top_p, top_k, min_p, rep_pen, presence_pen, seed
  std::vector<FaultSpec> faults;

  // Canonical "key=value,..." of every toggle that differs from the default, in table order;
  // "default" when none does.
  std::string str() const;
  bool operator==(const RunConfig& o) const { return str() == o.str(); }

  // Typed setters returning a copy, for configurations built in code (no text to parse): each sets
  // the field as the `--config` key would ("precision=q8_0": precision and precision_set).
  RunConfig with_precision(Precision p) const;
  RunConfig with_backend(BackendKind b) const;
  // InputError "config: tp=N: expected an integer in [1, 64]" out of range, as `--config tp=N`.
  RunConfig with_tp(int n) const;

  // backend=cuda,precision=ref: the reference's fp32 numerics on the GPU (CudaBackend reference).
  bool cuda_reference() const { return backend == BackendKind::cuda && precision_set && precision == Precision::ref; }

  // Effective storage dtypes at a layer, resolving the "unset" defaults from the model config.
  DType ssm_dtype_at(int layer, const ModelConfig& cfg) const;
  DType conv_dtype_at(int layer, const ModelConfig* cfg) const;
  // Faults active at `layer` (-1: model-level faults such as the MTP ones).
  std::vector<std::string> faults_at(int layer, const ModelConfig* cfg) const;
  bool has_fault(const std::string& name, int layer, const ModelConfig* cfg) const;

  // Why this configuration cannot run on its backend in this build, or "" when it can.
  std::string untestable_reason(bool cuda_built) const;
};

// Parses "key=value,...". Unknown keys, bad values and bad scopes throw InputError naming them.
RunConfig parse_run_config(const std::string& text);
// Applies "key=value,..." on top of `base` (same rules).
RunConfig apply_run_config(RunConfig base, const std::string& text);
// Checks scopes against the model (layer indices in range) and model-dependent values.
void validate_run_config(const RunConfig& rc, const ModelConfig& cfg);
// The one check of a run's configuration against its model and this build, in this order:
// validate_run_config (InputError), untestable_reason (UntestableError "config C: why"), check_faults
// (engine/faults.h). make_backend runs it before it builds anything; the Engine trusts it.
void check_run_config(const RunConfig& rc, const ModelConfig& cfg, bool cuda_built);

// The toggles themselves (keys in canonical order, values, help, how each parses, prints and mixes):
// the registry of engine/toggles.h.

// The known fault names (defined with the fault catalogue, src/engine/faults.cpp). Used by the parser.
const std::vector<std::string>& known_fault_names();

}  // namespace degen

namespace degen {

// ---- toggle-level views, for bisection (DESIGN.md §7 steps 3-5) ----

// Whether a toggle key can be restricted to layers.
bool toggle_scopable(const std::string& key);
// The toggles on which `good` and `bad` differ: keys of toggles() in order, then "fault:NAME"
// for each fault of `bad` that `good` lacks (with the same scope).
std::vector<std::string> differing_toggles(const RunConfig& good, const RunConfig& bad);
// `good` with the toggles `keys` taken from `bad`. With `layers`, scopable toggles and faults take
// bad's value only on those of `layers` that can host them (GDN-only toggles on GDN layers, attention
// toggles on full-attention layers, faults per their site) and keep good's elsewhere; toggles that
// cannot be scoped are taken whole.
RunConfig mix_configs(const RunConfig& good, const RunConfig& bad, const std::vector<std::string>& keys,
                      const std::vector<int>* layers, const ModelConfig& cfg);
// The layers a toggle key (or "fault:NAME") can act on.
std::vector<int> toggle_layers(const std::string& key, const ModelConfig& cfg);

}  // namespace degen
