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
// - Toggles and faults that an op's arguments do not carry come through one per-layer hook,
//   begin_layer(LayerNumerics), never as extra parameters of individual ops.
// - Stateful tensors carry their storage dtype: an op that updates a conv window or a GDN state
//   stores the result rounded to that tensor's dtype, whatever the activation dtype.
#pragma once
#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/faults.h"
#include "engine/state.h"
#include "engine/tensor.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace degen {

struct SamplingParams;  // engine/sampler.h

struct TpGroup;

// Gated delta rule for prefill (spec model.md §4.7.5-4.7.6): the chunked WY form with fp32
// intermediates; token by token; or the chunked form with flash-linear-attention's storage points
// (chunk_gated_delta_rule: the UT transform, w, u, the per-chunk states, v_new and the output's
// decayed QKᵀ kept in the activation dtype between its products), run on tensor cores on CUDA.
enum class GdnAlgo : uint8_t { chunked, recurrent, fla };
const char* gdn_algo_name(GdnAlgo a);
// Attention algorithm (DESIGN.md §5): materialised softmax; tiled online softmax (probabilities
// rounded to bf16 before P·V); split-KV decode with a log-sum-exp merge (prefill: as flash).
enum class AttnAlgo : uint8_t { naive, flash, splitkv, grouped };
constexpr int kAttnAlgoCount = 4;
const char* attn_algo_name(AttnAlgo a);


// The numerics the ops of one layer run with: the toggles and faults of DESIGN.md §5 and §7
// resolved for that layer by the engine (Engine::numerics) and handed to the backend by
// Backend::begin_layer before the layer's ops. One struct, so a CUDA backend honours exactly what
// the CPU backend honours.
struct LayerNumerics {
  int layer = -1;    // decoder layer; -1: model-level ops (embedding, final norm, LM head)
  bool mtp = false;  // the MTP head's decoder layer
  AttnAlgo attn = AttnAlgo::naive;
  // Storage dtypes (a value equal to the backend's own activation / state dtype rounds nothing).
  // The GDN state and conv window carry theirs as the dtype of their tensors (Engine::new_state
  // allocates them from these two); ops read the KV dtype from here when they allocate the cache.
  DType ssm_dtype = DType::f32;   // recurrent state S between steps and between chunks
  DType conv_dtype = DType::f32;  // conv window
  DType kv_dtype = DType::f32;    // KV cache rows (f8_e4m3: OCP e4m3fn, saturating, scale 1)
  std::bitset<static_cast<size_t>(Fault::count)> faults;
  bool has(Fault f) const { return faults.test(static_cast<size_t>(f)); }
};

// RMSNorm weight convention (spec §4.2): zero-centred x̂·(1+w) or plain x̂·w; shifted_twice x̂·(2+w)
// is fault norm-double-plus-one (the +1 shift applied twice, mlx-lm PR #1623).
enum class NormKind : uint8_t { zero_centred, plain, shifted_twice };
// What every backend adds to the stored weight for `kind`: 1 (zero-centred), 0 (plain), 2.
constexpr float norm_weight_shift(NormKind kind) {
  return kind == NormKind::plain ? 0.0f : kind == NormKind::zero_centred ? 1.0f : 2.0f;
}

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
  // The GPU path (the CUDA backend, or the CPU's emulation of its storage at precision=bf16): the
  // toggles left unset take the GPU defaults RunConfig resolves (e.g. the SSM state dtype).
  virtual bool gpu_path() const = 0;

  // ---- per-layer numerics ----
  // The engine calls begin_layer before the ops of each decoder layer (and of the MTP layer), and
  // with layer -1 before the model-level ops. Ops read the toggles and faults they honour from
  // numerics(); everything else about an op is in its arguments.
  virtual void begin_layer(const LayerNumerics& n) { numerics_ = n; }
  const LayerNumerics& numerics() const { return numerics_; }

  // ---- threads ----
  // Called on a thread before it runs this backend's ops (tensor parallelism runs each rank's ops
  // on its own thread): a CUDA backend makes its device current there.
  virtual void bind_thread() {}
  // A hint that `w` is about to be read (the next layer's weights, while this one computes): a
  // backend that reads weights from their memory mapping may start reading them from storage now,
  // so that a checkpoint larger than RAM streams with its reads overlapping the arithmetic. No effect
  // on any result.
  virtual void prefetch(const TensorView& w) { (void)w; }

  // ---- tensor parallelism ----
  // tp > 1: the ranks this backend is rank 0 of, attached by make_backend (engine/tp.h); the
  // Engine runs every rank from it. Null at tp = 1.
  TpGroup* tp_group() const { return tp_group_.get(); }
  void attach_tp_group(std::shared_ptr<TpGroup> g) { tp_group_ = std::move(g); }
  int tp_size() const;

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
  // (The arguments are checked here, once for every backend; the backend computes: do_rmsnorm.)
  Tensor rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind);
  // u = add(a, b) and rmsnorm(u, w, eps, kind), as those two ops compute them (the residual add and
  // the norm after it); returns {u, normed}. Default: the two ops; a device backend may do both in
  // one pass.
  virtual std::pair<Tensor, Tensor> add_rmsnorm(const Tensor& a, const Tensor& b, const TensorView& w, double eps,
                                                NormKind kind);
  // Gated RMSNorm, norm before gate (spec §4.2b): w ⊙ x̂ ⊙ silu(z); x, z [rows, d].
  // numerics(): fault gdn_norm_plus_one. (Checked here; computed by do_gated_rmsnorm.)
  Tensor gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps);
  // x / sqrt(sum x² + eps) * scale over the last dimension (GDN q/k, spec §4.7.3).
  // numerics(): fault gdn_skip_l2norm.
  virtual Tensor l2norm(const Tensor& x, double eps, double scale) = 0;

  // The GDN conv output's split (spec §4.7.3): conv [N, 2 nk dk + nv dv] -> q = l2norm(q part) *
  // q_scale [N, nk, dk], k = l2norm(k part) [N, nk, dk], v [N, nv, dv]: slice_cols and l2norm as
  // the engine composed them (default); a device backend may do it in one pass.
  struct GdnQkv { Tensor q, k, v; };
  virtual GdnQkv gdn_split_norm(const Tensor& conv, int64_t nk, int64_t dk, int64_t nv, int64_t dv, double eps,
                                double q_scale);

  // ---- products ----
  // y = x Wᵀ: x [.., in], w [out, in] (bf16/f16/f32) -> [.., out].
  virtual Tensor matmul(const Tensor& x, const TensorView& w) = 0;
  // matmul(x, *ws[i]) for each weight (the projections of one input), in order. Default: one
  // matmul each; a device backend may read x once for all (CudaBackend: one launch for decode rows).
  virtual std::vector<Tensor> matmul_many(const Tensor& x, std::span<const TensorView* const> ws);
  // swiglu(matmul(x, gate), matmul(x, up)), the same storage points. Default: those three ops.
  virtual Tensor matmul_swiglu(const Tensor& x, const TensorView& gate, const TensorView& up);
  // The norm before a layer's first product, left to the product (the decode step's input and
  // post-attention norms): norm_matmul_many(h, pre, ws) = matmul_many(rmsnorm(h, *pre.w, pre.eps,
  // pre.kind), ws), norm_matmul_swiglu likewise, the same storage points (the normed rows rounded
  // as rmsnorm stores them). Default: those ops; a device backend may norm inside the product.
  struct PreNorm {
    const TensorView* w = nullptr;
    double eps = 0.0;
    NormKind kind = NormKind::zero_centred;
  };
  virtual std::vector<Tensor> norm_matmul_many(const Tensor& h, const PreNorm& pre,
                                               std::span<const TensorView* const> ws);
  virtual Tensor norm_matmul_swiglu(const Tensor& h, const PreNorm& pre, const TensorView& gate, const TensorView& up);
  // add(res, matmul(x, w)): a residual add after an output projection. Default: those two ops; a
  // device backend may add in the product's epilogue.
  virtual Tensor matmul_add(const Tensor& x, const TensorView& w, const Tensor& res);
  // add(res, sigmoid_mul(matmul(x, w), gate)) with gate [N, 1]: the MoE shared expert's down
  // projection, its scalar sigmoid gate and the sum with the routed experts. Default: those three
  // ops; a device backend may gate and add in the product's epilogue (the same storage points).
  virtual Tensor matmul_gate_add(const Tensor& x, const TensorView& w, const Tensor& gate, const Tensor& res);
  // The output projections with the op before them, and with `res` the residual add after them
  // (matmul_add), the same storage points. Default: those ops; a device backend may compute the
  // op's output inside the product.
  //   gated_norm_matmul: gated_rmsnorm of x and z [N, in] in groups of norm_w's length (the GDN
  //     gated norm per value head), then the product (the GDN out_proj);
  //   sigmoid_gate_matmul: sigmoid_mul(x, gate) [N, in], then the product (attention's o_proj).
  virtual Tensor gated_norm_matmul(const Tensor& x, const Tensor& z, const TensorView& norm_w, double eps,
                                   const TensorView& w, const Tensor* res);
  virtual Tensor sigmoid_gate_matmul(const Tensor& x, const Tensor& gate, const TensorView& w, const Tensor* res);

  // ---- attention (spec §4.4-4.5) ----
  // Rotate-half RoPE on dims [0, rotary_dim) of every head; x [N, heads, D], pos [N] (may be < 0).
  // numerics(): fault rope_interleaved.
  virtual void rope_partial(Tensor& x, const std::vector<int64_t>& pos, int rotary_dim, double theta) = 0;
  // ω_i = 1 / θ^(2i / R), i < R / 2, in fp32 (HF's inv_freq): every backend's RoPE rotates by these.
  // freq_dim: the dims the exponent counts (rotary_dim; head_dim under fault rope_freq_head_dim).
  static std::vector<float> rope_inv_freq(int rotary_dim, double theta, int freq_dim = 0);
  // The gated attention's inputs from its projections (spec §4.4 steps 1-4): qg [N, nq * 2D] (per
  // head [query | gate]) and k [N, nkv * D] -> q = rope(rmsnorm(query)) [N, nq, D], gate [N, nq * D],
  // k = rope(rmsnorm(k)) [N, nkv, D], with `kind` norms and rotate-half RoPE on `rotary_dim` dims.
  // Default: slice_cols, rmsnorm and rope_partial as the engine composed them; a device backend may
  // do it in one pass.
  struct AttnInputs { Tensor q, gate, k; };
  virtual AttnInputs attn_inputs(const Tensor& qg, const Tensor& k, const TensorView& q_norm, const TensorView& k_norm,
                                 double eps, NormKind kind, const std::vector<int64_t>& pos, int rotary_dim,
                                 double theta, int64_t nq, int64_t nkv, int64_t D);
  // attn_inputs, then attention() of its q and k with v [N, nkv, D] over the caches: the attention
  // output [N, nq * D] and the gate, as those two ops compute them (fault qgate-split: the engine
  // composes the ops itself). Default: the two ops; a device backend may append the K/V rows in the
  // inputs' launch.
  struct AttnCore { Tensor out, gate; };
  virtual AttnCore attn_inputs_attention(const Tensor& qg, const Tensor& k, const Tensor& v, const TensorView& q_norm,
                                         const TensorView& k_norm, double eps, NormKind kind,
                                         const std::vector<int64_t>& pos, int rotary_dim, double theta, int64_t nq,
                                         int64_t nkv, int64_t D, const std::vector<SeqSpan>& spans,
                                         const std::vector<KvCache*>& caches);
  // Appends k, v [N, n_kv, D] to each sequence's cache (cache len must equal span.pos0), then
  // causal GQA softmax attention of q [N, n_q, D] over the cache, scale D^-1/2 -> [N, n_q * D].
  // numerics(): attn (the algorithm), kv_dtype (cache storage, used when the cache is allocated
  // and checked against an existing one), fault kv_off_by_one. (Checked here; computed by do_attention.)
  Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                   const std::vector<KvCache*>& caches);

  // ---- Gated DeltaNet (spec §4.7) ----
  // Depthwise causal conv + SiLU over x [N, C] with w [C, 1, K]; each sequence starts from its
  // window [K-1, C] (the previous pre-conv rows) and leaves the last K-1 rows in it, rounded to the
  // window's dtype. numerics(): fault conv_window_stuck. (Checked here; computed by do_conv1d_causal.)
  Tensor conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                       const std::vector<Tensor*>& windows);
  // g = -exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b); a, b [N, n_v] -> g, beta [N, n_v].
  // note: g is returned in the backend's compute dtype (fp32 on the GPU path, spec §4.10), beta in
  // the activation dtype. numerics(): fault alog_no_exp.
  virtual void gdn_gates(const Tensor& a, const Tensor& b, const TensorView& A_log, const TensorView& dt_bias,
                         Tensor& g, Tensor& beta) = 0;
  // Gated delta rule: q, k [N, n_k, d_k] (normalised, q scaled), v [N, n_v, d_v], g, beta [N, n_v];
  // value head j reads key head j / r. Each sequence starts from and updates its state S
  // [n_v, d_k, d_v], stored in S's dtype after every token (recurrent) or chunk (chunked), with
  // compute-dtype arithmetic in between. Returns o [N, n_v, d_v]. chunked (C = 64, §4.7.6) and
  // recurrent (§4.7.5) are the same function up to rounding.
  // numerics(): faults gdn_read_before_decay, gdn_head_mod, gdn_out_fp16.
  virtual Tensor gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
                     const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) = 0;
  // The gated delta rule's inputs from a GDN layer's projections (§4.7.2-4.7.4): what
  // conv1d_causal(qkv), gdn_split_norm of its output and gdn_gates(a, b) compute, with the same
  // storage points and window updates; the conv output itself is not returned. (Checked here;
  // computed by do_gdn_inputs: by default those three ops, a device backend may do them in one pass.)
  struct GdnHeads { int64_t nk = 0, dk = 0, nv = 0, dv = 0; };
  struct GdnInputs { Tensor q, k, v, g, beta; };
  GdnInputs gdn_inputs(const Tensor& qkv, const TensorView& conv_w, const std::vector<SeqSpan>& spans,
                       const std::vector<Tensor*>& windows, const Tensor& a, const Tensor& b, const TensorView& A_log,
                       const TensorView& dt_bias, const GdnHeads& heads, double eps, double q_scale);

  // ---- MoE (spec §4.8) ----
  // softmax over all experts, top-k, optional renormalisation; logits [N, E].
  virtual MoeRouting moe_route(const Tensor& router_logits, int k, bool renormalise) = 0;
  // The routed experts (steps 2-5) with the routing kept on the device: for x [N, H] and router
  // logits [N, E], the sum over each row's top-k experts, in increasing expert id, of its routing
  // weight times the expert's SwiGLU MLP of the row, with the storage points of what the engine does
  // with moe_route's routing on the host (gather_rows, matmul_swiglu, matmul, scatter_add_rows into
  // zeros), so no host read-back and no graph pause. nullopt where a backend does not (the default):
  // the engine routes on the host. CudaBackend does at decode sizes under gemm=auto.
  virtual std::optional<Tensor> moe_experts_on_device(const Tensor& x, const Tensor& router_logits,
                                                      const std::vector<MlpWeights>& experts, int k, bool renormalise) {
    (void)x, (void)router_logits, (void)experts, (void)k, (void)renormalise;
    return std::nullopt;
  }

  // ---- logits ----
  // logits [rows, V]: entries whose mask byte is 1 become -inf (mask has V entries).
  virtual void mask_logits(Tensor& logits, const std::vector<uint8_t>& mask) = 0;

  // The token that sample() (engine/sampler.h) chooses from row `row` of logits [rows, V], with the
  // same arguments. Default: the row copied to the host and sample() itself; a device backend may
  // sample where the logits are (CudaBackend: cuda::sample_on_device, the same Philox draws).
  virtual int32_t sample_row(const SamplingParams& params, const Tensor& logits, int64_t row,
                             std::span<const uint8_t> banned, std::span<const int32_t> prompt_ids,
                             std::span<const int32_t> generated_ids, uint32_t case_index, uint32_t position);

  // ---- taps: the steps inside a fused op (observation, engine.cpp "Observe what runs") ----
  // While the engine observes a layer it hands the backend a TapSink before each fused op. The op
  // writes to it the values it computes on the way (the normed input of a product, attention's q
  // and k after RoPE, the GDN conv output, the gated input of an output projection, a product
  // before its residual add), when it computes them, without changing what it computes: the
  // observed run is the run that is not observed. A backend whose kernel keeps such a value inside
  // (shared memory, registers) writes nothing; the step is then internal to the fused op, and localisation names
  // the op and its steps (engine/fused_ops.h). The default compositions below write every role.
  enum class TapRole : uint8_t { normed_input, attn_q, attn_k, gdn_conv, gated, product };
  struct TapSink {
    std::vector<std::pair<TapRole, Tensor>> got;  // in the order the op computed them
  };
  void set_tap_sink(TapSink* sink) { tap_sink_ = sink; }
  bool taps_wanted() const { return tap_sink_ != nullptr; }
  // A copy of t into the sink under `role`, when a sink is set (for backends and their kernels).
  void write_tap(TapRole role, const Tensor& t);

  // ---- CUDA graphs for decode steps (graphs=on; see src/cuda/graphs.h) ----
  // The engine brackets a decode step with these when graphs() is true. `key` names everything the
  // step's launches depend on besides the host inputs its ops upload (toggles, batch shape, cache
  // and state buffers); graph_step_begin returns false when this step runs as plain launches.
  // Between graph_step_pause and graph_step_resume the ops may read results on the host (MoE
  // routing). After an exception inside a step the engine calls graph_step_abort.
  virtual bool graphs() const { return false; }
  virtual bool graph_step_begin(const std::string& key) { (void)key; return false; }
  virtual void graph_step_pause() {}
  virtual void graph_step_resume() {}
  virtual void graph_step_end() {}
  virtual void graph_step_abort() noexcept {}
  // One line on how the decode steps ran ("" when graphs are off).
  virtual std::string graph_summary() const { return ""; }

 protected:
  // The ops whose arguments the interface checks (above): a backend implements only the computation.
  virtual Tensor do_rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) = 0;
  virtual Tensor do_gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) = 0;
  virtual Tensor do_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                              const std::vector<KvCache*>& caches) = 0;
  virtual Tensor do_conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                                  const std::vector<Tensor*>& windows) = 0;
  virtual GdnInputs do_gdn_inputs(const Tensor& qkv, const TensorView& conv_w, const std::vector<SeqSpan>& spans,
                                  const std::vector<Tensor*>& windows, const Tensor& a, const Tensor& b,
                                  const TensorView& A_log, const TensorView& dt_bias, const GdnHeads& heads,
                                  double eps, double q_scale);
  LayerNumerics numerics_;  // set by begin_layer; a backend initialises its storage dtypes to its own

 private:
  std::shared_ptr<TpGroup> tp_group_;
  TapSink* tap_sink_ = nullptr;
};

// A KV cache keeps the dtype it was made with: a state used with other toggles is an input error
// (both backends call this before they grow or write a cache).
void check_kv_dtype(const KvCache& c, DType dtype);

}  // namespace degen
