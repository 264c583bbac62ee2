// Backend: the ops the forward pass is written against (DESIGN.md §4), at the granularity of the
// model spec (../shared/spec/model.md §4). The engine (engine.cpp) owns the layer loop and calls
// only these; CpuBackend (src/cpu) and a CUDA backend implement them.
//
// Conventions
// - Activations are Tensors of act_dtype() on the backend's device, row-major; "N" is the number
//   of token rows in a batch (the rows of all sequences, concatenated in order).
// - Weights are TensorViews into the checkpoint's memory map (bf16, f16 or f32), PyTorch layout
//   [out, in]; a backend converts them as it needs and never keeps a full fp32 copy.
// - Ops that mix positions of one sequence (attention, conv, GDN) take the sequences' row spans
//   and their per-sequence state, and update that state.
// - Host-side small vectors (positions, token ids, routing) are plain std::vectors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/state.h"
#include "engine/tensor.h"
#include "model/safetensors.h"

namespace degen {

enum class GdnAlgo : uint8_t { chunked, recurrent };
const char* gdn_algo_name(GdnAlgo a);

// RMSNorm weight convention (spec §4.2): zero-centred x̂·(1+w) or plain x̂·w.
enum class NormKind : uint8_t { zero_centred, plain };

// Rows of one sequence inside a batch tensor.
struct SeqSpan {
  int64_t row0 = 0;  // first row in the batch
  int64_t rows = 0;  // tokens of this sequence in this call
  int64_t pos0 = 0;  // absolute position of the first row (= tokens already in its state)
};

// Top-k routing of a MoE block for N tokens (spec §4.8), on the host.
struct MoeRouting {
  int k = 0;
  std::vector<int32_t> experts;  // [N, k] expert ids, by decreasing probability
  std::vector<double> weights;   // [N, k] routing weights (renormalised when asked)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;     // "cpu:ref", "cpu:fp64", ...
  virtual DType act_dtype() const = 0;      // activations, KV cache, conv window
  virtual DType state_dtype() const = 0;    // GDN recurrent state S

  // ---- memory ----
  virtual Tensor zeros(std::vector<int64_t> shape, DType dtype) = 0;
  Tensor zeros(std::vector<int64_t> shape) { return zeros(std::move(shape), act_dtype()); }
  virtual Tensor clone(const Tensor& t) = 0;                       // independent deep copy
  virtual std::vector<float> to_host_f32(const Tensor& t) = 0;     // any float dtype -> fp32
  virtual std::vector<double> to_host_f64(const Tensor& t) = 0;    // any float dtype -> fp64
  // Host values -> a tensor of `dtype` on this device (rounded to nearest).
  virtual Tensor from_host(const std::vector<double>& v, std::vector<int64_t> shape, DType dtype) = 0;
  Tensor from_host(const std::vector<double>& v, std::vector<int64_t> shape) {
    return from_host(v, std::move(shape), act_dtype());
  }

  // ---- layout ----
  virtual Tensor slice_cols(const Tensor& x, int64_t c0, int64_t n) = 0;  // x as [rows, cols] -> [rows, n]
  virtual Tensor gather_cols(const Tensor& x, const std::vector<int64_t>& cols) = 0;  // [rows, |cols|]
  virtual Tensor concat_cols(const Tensor& a, const Tensor& b) = 0;       // [rows, ca + cb]
  virtual Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) = 0;  // x as [rows, cols]
  virtual Tensor concat_rows(const std::vector<Tensor>& parts) = 0;  // same cols -> [Σ rows, cols]
  // out[rows[i]] += w[i] * y[i]  (out [R, C], y [|rows|, C]); rows processed in order.
  virtual void scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int64_t>& rows,
                                const std::vector<double>& w) = 0;

  // ---- elementwise and norms ----
  virtual Tensor embed(const TensorView& table, const std::vector<int32_t>& ids) = 0;  // [N, H]
  virtual Tensor add(const Tensor& a, const Tensor& b) = 0;
  // x * sigmoid(gate): same shape, or gate [rows, 1] broadcast along the row.
  virtual Tensor sigmoid_mul(const Tensor& x, const Tensor& gate) = 0;
  virtual Tensor swiglu(const Tensor& gate, const Tensor& up) = 0;  // silu(gate) * up
  // RMSNorm over the last dimension (spec §4.2a/b without gate); w has cols() elements.
  virtual Tensor rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) = 0;
  // Gated RMSNorm, norm before gate (spec §4.2b): w ⊙ x̂ ⊙ silu(z); x, z [rows, d].
  virtual Tensor gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) = 0;
  // x / sqrt(sum x² + eps) * scale over the last dimension (GDN q/k, spec §4.7.3).
  virtual Tensor l2norm(const Tensor& x, double eps, double scale) = 0;

  // ---- products ----
  // y = x Wᵀ: x [.., in], w [out, in] (bf16/f16/f32) -> [.., out].
  virtual Tensor matmul(const Tensor& x, const TensorView& w) = 0;

  // ---- attention (spec §4.4-4.5) ----
  // Rotate-half RoPE on dims [0, rotary_dim) of every head; x [N, heads, D], pos [N] (may be < 0).
  virtual void rope_partial(Tensor& x, const std::vector<int64_t>& pos, int rotary_dim, double theta) = 0;
  // Appends k, v [N, n_kv, D] to each sequence's cache (cache len must equal span.pos0), then
  // causal GQA softmax attention of q [N, n_q, D] over the cache, scale D^-1/2 -> [N, n_q * D].
  virtual Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                           const std::vector<KvCache*>& caches) = 0;

  // ---- Gated DeltaNet (spec §4.7) ----
  // Depthwise causal conv + SiLU over x [N, C] with w [C, 1, K]; each sequence starts from its
  // window [K-1, C] (the previous pre-conv rows) and leaves the last K-1 rows in it.
  virtual Tensor conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                               const std::vector<Tensor*>& windows) = 0;
  // g = -exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b); a, b [N, n_v] -> g, beta [N, n_v].
  virtual void gdn_gates(const Tensor& a, const Tensor& b, const TensorView& A_log, const TensorView& dt_bias,
                         Tensor& g, Tensor& beta) = 0;
  // Gated delta rule: q, k [N, n_k, d_k] (normalised, q scaled), v [N, n_v, d_v], g, beta [N, n_v];
  // value head j reads key head j / r. Each sequence starts from and updates its state S
  // [n_v, d_k, d_v]. Returns o [N, n_v, d_v]. chunked (C = 64, §4.7.6) and recurrent (§4.7.5)
  // are the same function up to rounding.
  virtual Tensor gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                     const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) = 0;

  // ---- MoE (spec §4.8) ----
  // softmax over all experts, top-k, optional renormalisation; logits [N, E].
  virtual MoeRouting moe_route(const Tensor& router_logits, int k, bool renormalise) = 0;

  // ---- logits ----
  // logits [rows, V]: entries whose mask byte is 1 become -inf (mask has V entries).
  virtual void mask_logits(Tensor& logits, const std::vector<uint8_t>& mask) = 0;
};

}  // namespace degen
