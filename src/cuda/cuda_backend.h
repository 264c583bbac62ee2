// CudaBackend: the Backend ops on one CUDA device (DESIGN.md §4), the GPU inference path the tool
// tests. The forward pass is the engine's (src/engine); this class only implements ops, mirroring
// CpuBackend op for op (src/cpu/<family>.cpp <-> src/cuda/<family>.cpp + kernels/<family>.cu).
// Numerics (spec model.md §4.10, the storage points CpuBackend precision=bf16 emulates):
//   - weights: uploaded once as bf16 (a wider weight is rounded), cached per TensorView; A_log and
//     dt_bias stay as stored (fp32 or bf16), as the decay uses them;
//   - activations, residual stream, projections, norm outputs, attention outputs: bf16, every
//     kernel computing in fp32 and rounding once on output;
//   - matrix products: bf16 x bf16 with fp32 accumulation, rounded to bf16 once: a matrix-vector
//     kernel for up to 8 rows and cuBLAS above (gemm=auto, the default), cuBLAS always
//     (gemm=cublas) or a plain tiled kernel (gemm=simple);
//   - g (log decay) and MoE routing weights fp32; KV cache bf16 or fp8 e4m3 (numerics().kv_dtype);
//   - attention per numerics().attn: naive (scores and probabilities materialised in bf16 around an
//     fp32 softmax), flash (tiles of 64 keys, online softmax, probabilities rounded to bf16 before
//     P·V), splitkv (decode: 4 key splits merged by log-sum-exp; prefill as flash).
//   - GDN (kernels/conv1d.cu, gdn_gates.cu, gdn.cu): conv window in its tensor's dtype (conv_dtype),
//     recurrent state S in its tensor's dtype (ssm_dtype) rounded after every token (recurrent) or
//     chunk (chunked, C = 64), fp32 arithmetic, g fp32, o bf16.
// The reference on the GPU (precision=ref, `reference` below): the same ops with fp32 activations,
// residual stream, projections, norm outputs, logits, KV cache and conv window (the engine's
// defaults follow act_dtype()), fp32 GDN state, cos/sin not rounded, attention probabilities fp32,
// matrix products fp32 GEMM; weights as stored (bf16 kept, a wider one widened to fp32), so it
// computes what CpuBackend precision=ref computes, in other summation orders (golden
// --config backend=cuda checks it against the CPU: diag/golden.h).
// Faults of the catalogue honoured by the kernels (numerics().faults): rope-interleaved,
// kv-off-by-one, gdn-norm-plus-one, gdn-skip-l2norm, alog-no-exp, conv-window-stuck,
// gdn-read-before-decay, gdn-head-mod, gdn-out-fp16; the engine-level ones (rope-all-dims,
// norm-no-plus-one, qgate-split, moe-no-renorm) reach the kernels as arguments.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/backend.h"

namespace degen {

namespace cuda {
class CudaContext;
class StepGraphs;
struct GraphStats;
struct GemvPrologue;
struct KvStore;
}  // namespace cuda

// automatic (gemm=auto, the default): the matrix-vector kernel for products of at most
// kGemvMaxRows rows (decode steps) on the bf16 path, cuBLAS otherwise; cublas: cuBLAS always;
// simple: the plain tiled kernel always.
enum class GemmKind : uint8_t { automatic, cublas, simple };
enum class GemmMode : uint8_t;  // engine/run_config.h
// RunConfig::gemm (unset: auto) as a GemmKind.
GemmKind gemm_kind(const std::optional<GemmMode>& gemm);

// Counters for `bench` (bytes of weights the products read; optionally the GDN core's time).
struct CudaStats {
  double weight_bytes = 0;        // weight bytes read by matmul() and embed()
  double matmul_flops = 0;        // 2 * N * in * out summed
  // time_gdn: conv1d_causal, gdn_gates and gdn synchronise the stream before and after themselves
  // and add their wall time to gdn_seconds (bench's GDN share of a prefill; off by default, as the
  // synchronisations slow a decode step down).
  bool time_gdn = false;
  double gdn_seconds = 0;
  int64_t gdn_calls = 0;
  int64_t device_samples = 0;  // tokens chosen on the device (sample_row)
  void reset() {
    const bool t = time_gdn;
    *this = CudaStats{};
    time_gdn = t;
  }
};

class CudaBackend final : public Backend {
 public:
  // Opens `device` (UntestableError with the reason when it cannot).
  // graphs: decode steps as CUDA graphs (graphs=on; cuda/graphs.h).
  // reference: precision=ref (fp32 activations) instead of the bf16 GPU path.
  explicit CudaBackend(int device = 0, GemmKind gemm = GemmKind::automatic, bool graphs = false, bool reference = false);
  ~CudaBackend() override;

  std::string name() const override;
  DType act_dtype() const override { return reference_ ? DType::f32 : DType::bf16; }
  // The reference keeps the reference's storage defaults (fp32 state), not the GPU path's.
  bool gpu_path() const override { return !reference_; }
  bool reference() const { return reference_; }
  DType state_dtype() const override { return DType::f32; }

  const std::shared_ptr<cuda::CudaContext>& context() const { return ctx_; }
  GemmKind gemm() const { return gemm_; }
  CudaStats& stats() { return stats_; }
  // While counting (bench --count): at each begin_layer, the layer (-1: outside the decoder layers)
  // and the device calls counted so far, so that a step's calls can be attributed to its layers.
  struct LayerMark {
    int layer = -1;
    int64_t calls = 0;
  };
  void record_layer_marks(bool on) {
    layer_marks_on_ = on;
    layer_marks_.clear();
  }
  const std::vector<LayerMark>& layer_marks() const { return layer_marks_; }
  void sync();  // wait for every queued op (timing, tests)

  // ---- weights ----
  // The device copy of a weight (bf16; as stored for A_log / dt_bias: keep_dtype; on the reference
  // bf16 kept and any other dtype widened to fp32), uploaded on first use. A view without host data (synthetic bench weights) must have been registered.
  const Tensor& weight(const TensorView& w, bool keep_dtype = false);
  // Registers a device tensor as the copy of `w` (bench: weights generated on the device).
  void register_weight(const TensorView& w, Tensor device_copy);
  int64_t weight_bytes_on_device() const { return weight_bytes_; }

  void begin_layer(const LayerNumerics& n) override;
  // Makes this backend's device current on the calling thread (cudaSetDevice).
  void bind_thread() override;

  Tensor zeros(std::vector<int64_t> shape, DType dtype) override;
  using Backend::zeros;
  Tensor clone(const Tensor& t) override;
  std::vector<float> to_host_f32(const Tensor& t) override;
  std::vector<double> to_host_f64(const Tensor& t) override;
  Tensor from_host(const std::vector<double>& v, std::vector<int64_t> shape, DType dtype) override;
  using Backend::from_host;

  Tensor slice_cols(const Tensor& x, int64_t c0, int64_t n) override;
  Tensor gather_cols(const Tensor& x, const std::vector<int64_t>& cols) override;
  Tensor concat_cols(const Tensor& a, const Tensor& b) override;
  Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows) override;
  Tensor concat_rows(const std::vector<Tensor>& parts) override;
  void scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int64_t>& rows,
                        const std::vector<double>& w) override;

  Tensor embed(const TensorView& table, const std::vector<int32_t>& ids) override;
  Tensor add(const Tensor& a, const Tensor& b) override;
  Tensor sigmoid_mul(const Tensor& x, const Tensor& gate) override;
  Tensor swiglu(const Tensor& gate, const Tensor& up) override;
  Tensor do_rmsnorm(const Tensor& x, const TensorView& w, double eps, NormKind kind) override;
  Tensor do_gated_rmsnorm(const Tensor& x, const Tensor& z, const TensorView& w, double eps) override;
  Tensor l2norm(const Tensor& x, double eps, double scale) override;

  Tensor matmul(const Tensor& x, const TensorView& w) override;
  // gemm=auto, bf16 path, up to kGemvMaxRows rows: one launch for all (matmul_gemv_many_bf16 /
  // matmul_gemv_swiglu_bf16); otherwise Backend's composition.
  std::vector<Tensor> matmul_many(const Tensor& x, std::span<const TensorView* const> ws) override;
  Tensor matmul_swiglu(const Tensor& x, const TensorView& gate, const TensorView& up) override;
  // The same kernels with the norm in their prologue (when h's rows fit the block's shared memory
  // and the norm weight is bf16), the residual add in the plain product's epilogue; otherwise
  // Backend's composition.
  std::vector<Tensor> norm_matmul_many(const Tensor& h, const PreNorm& pre,
                                       std::span<const TensorView* const> ws) override;
  Tensor norm_matmul_swiglu(const Tensor& h, const PreNorm& pre, const TensorView& gate, const TensorView& up) override;
  Tensor matmul_add(const Tensor& x, const TensorView& w, const Tensor& res) override;
  Tensor matmul_gate_add(const Tensor& x, const TensorView& w, const Tensor& gate, const Tensor& res) override;
  Tensor gated_norm_matmul(const Tensor& x, const Tensor& z, const TensorView& norm_w, double eps, const TensorView& w,
                           const Tensor* res) override;
  Tensor sigmoid_gate_matmul(const Tensor& x, const Tensor& gate, const TensorView& w, const Tensor* res) override;
  GdnQkv gdn_split_norm(const Tensor& conv, int64_t nk, int64_t dk, int64_t nv, int64_t dv, double eps,
                        double q_scale) override;
  AttnInputs attn_inputs(const Tensor& qg, const Tensor& k, const TensorView& q_norm, const TensorView& k_norm,
                         double eps, NormKind kind, const std::vector<int64_t>& pos, int rotary_dim, double theta,
                         int64_t nq, int64_t nkv, int64_t D) override;
  // attn_inputs_kernel storing the K/V rows in the caches, then the attention launches.
  AttnCore attn_inputs_attention(const Tensor& qg, const Tensor& k, const Tensor& v, const TensorView& q_norm,
                                 const TensorView& k_norm, double eps, NormKind kind, const std::vector<int64_t>& pos,
                                 int rotary_dim, double theta, int64_t nq, int64_t nkv, int64_t D,
                                 const std::vector<SeqSpan>& spans, const std::vector<KvCache*>& caches) override;
  std::pair<Tensor, Tensor> add_rmsnorm(const Tensor& a, const Tensor& b, const TensorView& w, double eps,
                                        NormKind kind) override;

  void rope_partial(Tensor& x, const std::vector<int64_t>& pos, int rotary_dim, double theta) override;
  Tensor do_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<SeqSpan>& spans,
                      const std::vector<KvCache*>& caches) override;

  Tensor do_conv1d_causal(const Tensor& x, const TensorView& w, const std::vector<SeqSpan>& spans,
                          const std::vector<Tensor*>& windows) override;
  // Calls of at most kConvFusedRows rows per sequence: kernels/conv1d.cu gdn_conv_inputs_kernel (one
  // launch); otherwise Backend's composition.
  GdnInputs do_gdn_inputs(const Tensor& qkv, const TensorView& conv_w, const std::vector<SeqSpan>& spans,
                          const std::vector<Tensor*>& windows, const Tensor& a, const Tensor& b, const TensorView& A_log,
                          const TensorView& dt_bias, const GdnHeads& heads, double eps, double q_scale) override;
  void gdn_gates(const Tensor& a, const Tensor& b, const TensorView& A_log, const TensorView& dt_bias,
                 Tensor& g, Tensor& beta) override;
  Tensor gdn(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
             const std::vector<SeqSpan>& spans, const std::vector<Tensor*>& states, GdnAlgo algo) override;

  MoeRouting moe_route(const Tensor& router_logits, int k, bool renormalise) override;
  // At most kGemvMaxRows bf16 rows under gemm=auto: moe_route_cuda, then kernels/moe.cu's two expert
  // launches over a device table of the experts' weights (built once per block, outside graph
  // captures; every expert is uploaded then).
  std::optional<Tensor> moe_experts_on_device(const Tensor& x, const Tensor& router_logits,
                                              const std::vector<MlpWeights>& experts, int k, bool renormalise) override;
  void mask_logits(Tensor& logits, const std::vector<uint8_t>& mask) override;
  // On the device (cuda::sample_on_device): only the token comes back to the host.
  int32_t sample_row(const SamplingParams& params, const Tensor& logits, int64_t row, std::span<const uint8_t> banned,
                     std::span<const int32_t> prompt_ids, std::span<const int32_t> generated_ids, uint32_t case_index,
                     uint32_t position) override;

  // ---- CUDA graphs (graphs=on): decode steps recorded, captured, then replayed (cuda/graphs.h) ----
  bool graphs() const override { return graphs_ != nullptr; }
  bool graph_step_begin(const std::string& key) override;
  void graph_step_pause() override;
  void graph_step_resume() override;
  void graph_step_end() override;
  void graph_step_abort() noexcept override;
  std::string graph_summary() const override;
  // Turns graphs on or off between steps (bench measures both on one backend and its weights).
  void set_graphs(bool on);
  // Steps recorded / captured / replayed so far (zeros with graphs off).
  cuda::GraphStats graph_stats() const;
  // Inside a graph step and not paused: buffers come from the step's arena, host inputs are staged.
  bool graphs_segment() const;
  // Whether this thread may enqueue device work now (false while a graph step replays: the graph
  // does the work). The op files check it before copies and memsets they enqueue themselves.
  static bool enqueue_allowed();

  // ---- helpers shared by the op files ----
  // Uninitialised. Inside a graph step (graphs_segment()) a step buffer comes from the step's arena;
  // step_buffer = false for what outlives the step (weights).
  Tensor device_tensor(std::vector<int64_t> shape, DType dtype, const char* what, bool step_buffer = true);
  // A host vector copied to a fresh device buffer (indices, positions, masks).
  template <typename T>
  Tensor upload(const std::vector<T>& v, DType dtype, const char* what);
  Tensor to_device(const Tensor& host);  // host tensor -> device copy (same dtype)
  Tensor to_host(const Tensor& dev);     // device tensor -> host copy (same dtype), synchronises

  // ---- tests: sentinel guards (test-backend-ops style) ----
  // While on, every buffer the backend allocates gets kGuardBytes before and after it filled with
  // kGuardByte, and its body poisoned with 0xFF bytes (NaN in bf16, f16 and f32), so an element a
  // kernel forgot to write shows up as NaN and a write out of bounds changes a guard.
  static constexpr size_t kGuardBytes = 1024;
  static constexpr uint8_t kGuardByte = 0xA5;
  void set_guard_check(bool on) { guard_ = on; }
  // "what: N bytes changed before/after" for every live guarded buffer whose guards changed (synchronises).
  std::vector<std::string> check_guards();
  // At most this many query rows per block in flash's tensor-core kernel (0: as the device's shared
  // memory allows), so that the 32- and 16-row blocks of smaller GPUs run on any device.
  void set_flash_tc_rows_cap(int rows) { flash_tc_rows_cap_ = rows; }

 private:
  void require_device(const Tensor& t, const char* op) const;
  // The bookkeeping of an attention call (src/cuda/attention.cpp): each cache with room for its new
  // rows, the device tables of the K/V store and of the attention launches, the rows of each
  // algorithm; then the K/V store's arguments, and the attention launches.
  struct AttnPlan {
    int64_t N = 0, n_q = 0, n_kv = 0, D = 0;
    Tensor dseqs;                 // cuda::AttnSeq [S]
    Tensor store_seq, store_dst;  // [N]: each row's sequence and cache row
    std::vector<int32_t> rows[kAttnAlgoCount], row_seq[kAttnAlgoCount];  // by AttnAlgo
    int64_t max_ctx[kAttnAlgoCount] = {};
    // flash's multi-row sequences on tensor cores (kernels/attention_flash.cu): cuda::AttnTile
    // {seq, t0, rows} as int32 triples, not in rows[flash]
    std::vector<int32_t> tc_tiles;
    int tc_rows = 0;  // rows per block of those tiles (0: the kernel does not apply)
  };
  AttnPlan attention_plan(int64_t N, int64_t n_q, int64_t n_kv, int64_t D, const std::vector<SeqSpan>& spans,
                          const std::vector<KvCache*>& caches);
  cuda::KvStore kv_store(const AttnPlan& p, const Tensor& v) const;
  Tensor attention_run(const AttnPlan& p, const Tensor& q);
  // The attention inputs' kernel (src/cuda/rope.cpp), with a K/V store or without (store.v null);
  // whether it applies (both norm weights of one dtype and D long).
  bool attn_inputs_fusable(const TensorView& q_norm, const TensorView& k_norm, int64_t D);
  AttnInputs attn_inputs_launch(const Tensor& qg, const Tensor& k, const TensorView& q_norm, const TensorView& k_norm,
                                double eps, NormKind kind, const std::vector<int64_t>& pos, int rotary_dim,
                                double theta, int64_t nq, int64_t nkv, int64_t D, const cuda::KvStore& store);
  // The fused decode products (src/cuda/matmul.cpp): whether x's products go to the matrix-vector
  // kernels, whether a prologue fits (x's rows in the block's shared memory), the prologue norm of
  // `pre` for rows h (false: not fusable), and the launches.
  bool gemv_rows(const Tensor& x) const;
  bool gemv_prologue_fits(const Tensor& x) const;
  bool gemv_norm(const Tensor& h, const PreNorm& pre, cuda::GemvPrologue& p);
  Tensor gemv_one(const Tensor& x, const TensorView& w, const cuda::GemvPrologue& p, const Tensor* res,
                  const Tensor* row_gate = nullptr);
  std::vector<Tensor> gemv_many(const Tensor& x, std::span<const TensorView* const> ws, const cuda::GemvPrologue& p);
  Tensor gemv_swiglu(const Tensor& x, const TensorView& gate, const TensorView& up, const cuda::GemvPrologue& p);

  // Small uploads kept by content, most recent last (see upload()).
  struct CachedUpload {
    DType dtype;
    std::vector<uint8_t> bytes;
    Tensor dev;
  };
  std::vector<CachedUpload> upload_cache_;
  // The MoE blocks' expert tables (cuda::MoeExpertPtrs [E] on the device), by expert list; an empty
  // tensor where the experts cannot go to the device kernels (another dtype, shape or alignment).
  struct MoeTable {
    // the list it was built from: its length, and its first and last weights with their data (as
    // weight() checks a view's data, not only its address)
    size_t n = 0;
    const TensorView *first = nullptr, *last = nullptr;
    const uint8_t *first_data = nullptr, *last_data = nullptr;
    bool same(const std::vector<MlpWeights>& e) const {
      return e.size() == n && e[0].gate == first && e.back().down == last && first && last &&
             first->data == first_data && last->data == last_data;
    }
    Tensor table;
  };
  std::unordered_map<const void*, MoeTable> moe_tables_;
  Tensor graph_input(const void* src, const std::vector<int64_t>& shape, DType dtype, const char* what);
  const Tensor* moe_table(const std::vector<MlpWeights>& experts);
  struct CachedWeight {
    Tensor t;
    const uint8_t* data = nullptr;
    size_t nbytes = 0;
    std::string name;
  };
  std::shared_ptr<cuda::CudaContext> ctx_;
  GemmKind gemm_;
  bool reference_ = false;
  std::unique_ptr<cuda::StepGraphs> graphs_;  // graphs=on
  CudaStats stats_;
  std::unordered_map<const TensorView*, CachedWeight> weights_[2];  // [keep_dtype]
  int64_t weight_bytes_ = 0;
  struct Guarded {
    std::weak_ptr<uint8_t> storage;
    size_t nbytes = 0;
    std::string what;
  };
  bool guard_ = false;
  int flash_tc_rows_cap_ = 0;
  // attn=grouped's merge tickets (kernels/attention.h): zeroed once when grown, left zero by every
  // launch; a grown buffer keeps the old ones alive (a captured graph may still point at them).
  Tensor grouped_tickets_;
  std::vector<Tensor> retired_tickets_;
  unsigned* grouped_tickets(int64_t n);
  std::vector<Guarded> guarded_;
  bool layer_marks_on_ = false;
  std::vector<LayerMark> layer_marks_;
};

}  // namespace degen
