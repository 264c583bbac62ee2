// Engine: THE forward pass of Qwen3-Next / Qwen3.5 / Qwen3.6 (spec model.md §4, §6), written once
// against Backend. One call runs a batch of sequences, each continuing from its own SeqState:
// a prefill (fresh state, many tokens), a decode step (one token), or a continued prefill (many
// tokens on top of existing state) are the same call. Every intermediate goes through Trace.
// The toggles and faults of a RunConfig (DESIGN.md §5, §7) are resolved per layer here
// (numerics()) and handed to the backend before each layer (Backend::begin_layer).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/run_config.h"
#include "engine/state.h"
#include "engine/tp.h"
#include "engine/trace.h"
#include "model/config.h"
#include "model/shard.h"
#include "model/weights.h"

namespace degen {

struct EngineOptions {
  EngineOptions() = default;
  EngineOptions(GdnAlgo g, RunConfig r = {}) : gdn(g), run(std::move(r)) {}  // NOLINT: implicit on purpose
  // GDN algorithm for multi-token calls (one token is always recurrent); run.gdn's scoped
  // overrides apply on top of it (engine_options(rc) sets it to rc.gdn.base).
  GdnAlgo gdn = GdnAlgo::chunked;
  // Toggles and faults (attn, gdn overrides, ssm_dtype, conv_dtype, kv_dtype, fault); the other
  // fields (backend, precision, mtp, sampling, ...) are read by whoever builds the backend and runs
  // generation. The default reproduces the reference exactly.
  RunConfig run;
};

// Which rows get logits.
enum class LogitsRows : uint8_t { none, last, all };

struct SeqInput {
  SeqState* state = nullptr;
  std::vector<int32_t> tokens;  // appended at positions state->pos, state->pos + 1, ...
};

struct ForwardOptions {
  LogitsRows logits = LogitsRows::last;
  const std::vector<uint8_t>* vocab_mask = nullptr;  // [V], 1 = padding id -> -inf; null: no mask
  bool keep_hidden = false;                          // return the post-final-norm hidden states
};

struct ForwardOutput {
  // [rows, V]: last row of each sequence, or every row, in batch order. graphs=on: a decode step's
  // logits live in its CUDA graph's buffers, valid until the next decode step of the same shape.
  Tensor logits;
  Tensor hidden;                  // [N, H] after model.norm (when keep_hidden): the MTP input
  std::vector<TraceSeq> seqs;     // row layout of the batch (rows of every [N, ...] tensor)
  std::vector<int64_t> logits_row0;  // first logits row of each sequence
};

// One MTP input per sequence (spec §6): row i pairs the target's post-norm hidden state at
// position state->mtp_pos + i with the token that follows it.
struct MtpInput {
  SeqState* state = nullptr;
  Tensor hidden;                     // [n, H] post-final-norm hidden rows
  std::vector<int32_t> next_tokens;  // [n]
};

// Tensor parallelism (DESIGN.md §5 `tp`): when the backend carries a TpGroup (make_backend with
// tp > 1), this Engine is rank 0 and runs every rank, each on its own thread with its backend, its
// shard of the weights and its config (model/shard.h), through the same forward pass; the partial
// sums of o_proj, out_proj and the MLP/MoE block are all-reduced (engine/tp.h). The public API is
// the same as at tp = 1: states carry the peers' parts, logits and hidden states are rank 0's, and
// the trace shows full tensors (rank-local steps gathered over the ranks, partial sums summed),
// so a trace at tp = N compares with one at tp = 1 step for step.
class Engine {
 public:
  // Expects opt.run checked against the model (check_run_config, which make_backend runs: scopes,
  // the tp split, the faults); InputError when opt.run's tp is not the backend's number of ranks.
  Engine(const ModelConfig& cfg, const ModelWeights& w, Backend& backend, EngineOptions opt = {});
  ~Engine();

  const ModelConfig& config() const { return full_cfg_; }
  Backend& backend() { return be_; }
  EngineOptions& options() { return opt_; }
  int tp() const { return static_cast<int>(peers_.size()) + 1; }
  // The shard rank r runs with (null at tp = 1): its config and weights, for tests and `inspect`.
  const RankShard* shard(int rank) const;
  TpComm* comm() const { return comm_; }

  SeqState new_state();                        // empty caches, zero conv windows and S (in their storage dtypes)
  SeqState snapshot(const SeqState& s);        // deep copy (MTP rollback)
  GdnCheckpoint checkpoint_gdn(const SeqState& s);  // deep copy of the GDN conv windows and S only
  // fn(rank's backend, rank, layer, that rank's GDN state of the layer) for every GDN layer of every
  // rank, each rank on its own thread at tp > 1: the serving mechanisms' state edits (engine/serving.h).
  using GdnEdit = std::function<void(Backend& be, int rank, int layer, GdnState& g)>;
  void edit_gdn(SeqState& s, const GdnEdit& fn);
  // The same over two states of this engine at once (ga and gb: the same rank's parts).
  using GdnEdit2 = std::function<void(Backend& be, int rank, int layer, GdnState& ga, GdnState& gb)>;
  void edit_gdn2(SeqState& a, SeqState& b, const GdnEdit2& fn);

  // Runs every input's tokens through the model, updating the states.
  ForwardOutput forward(const std::vector<SeqInput>& inputs, const ForwardOptions& fo = {}, Trace* trace = nullptr);

  bool has_mtp() const { return !w_.mtp.empty(); }

  // The numerics of decoder layer `layer` (-1: the model-level ops; mtp: the MTP head's layer).
  // Scoped toggles and scoped faults apply to decoder layers only; the MTP layer takes the
  // unscoped values. Storage dtypes left unset in the RunConfig are the backend's own: the GPU
  // path's defaults (state: the checkpoint's mamba_ssm_dtype, else fp32; conv window and KV: bf16)
  // on a backend with 16-bit activations, the reference's fp32 / fp64 otherwise. A storage toggle
  // set explicitly applies under every precision (precision=ref,ssm_dtype=bf16 rounds the
  // reference's state). note: kv_dtype=bf16 unscoped is the default and cannot be told from an
  // unset one: on the reference it keeps fp32 KV; write kv_dtype=bf16@LAYERS to round there.
  LayerNumerics numerics(int layer, bool mtp) const;
  // MTP head (spec §6): draft logits [Σn, V] for the token after next; updates the MTP KV cache.
  Tensor mtp(const std::vector<MtpInput>& inputs, const std::vector<uint8_t>* vocab_mask = nullptr,
             Trace* trace = nullptr);

 private:
  struct Batch;
  // A peer rank (tp > 1).
  Engine(const ModelConfig& full, const ModelWeights& full_w, Backend& be, EngineOptions opt,
         std::shared_ptr<const RankShard> shard, int rank, TpComm* comm);
  void init();
  ForwardOutput forward_rank(const std::vector<SeqInput>& inputs, const ForwardOptions& fo, Trace* tr);
  Tensor mtp_rank(const std::vector<MtpInput>& inputs, const std::vector<uint8_t>* vocab_mask, Trace* tr);
  SeqState new_state_rank();
  SeqState snapshot_rank(const SeqState& s);
  GdnCheckpoint checkpoint_rank(const SeqState& s);
  Engine& rank_engine(int r) { return r == 0 ? *this : *peers_[static_cast<size_t>(r - 1)]; }
  template <typename T, typename F>
  T on_ranks(F fn);
  // The partial sums of a row-parallel product summed over the ranks (nothing at tp = 1 or `skip`).
  Tensor reduce(const Tensor& t, bool skip = false);
  void prefetch_layer(int l);  // Backend::prefetch of layer l's weights (l == L: the final norm and LM head)
  // The norm after a layer's last residual add, computed with it (Backend::add_rmsnorm) when no
  // trace observes the layers and that add is not done by the down projection (MoE, tp > 1): the
  // next layer's input norm, or the final norm after the last.
  struct NextNorm {
    const TensorView* w = nullptr;
    NormKind kind = NormKind::zero_centred;
    Tensor x;  // out: the normed rows
  };
  // x_in: this layer's input norm when the previous layer computed it (else empty: computed here).
  Tensor layer(int l, const LayerWeights& lw, Tensor h, Batch& b, Trace* tr, bool mtp, Tensor x_in = {},
               NextNorm* next = nullptr);
  // A norm's output x = rmsnorm(*h, pre): computed (x), or left to the product that reads it
  // (Backend::norm_matmul_many / norm_matmul_swiglu) where a single product does.
  struct Normed {
    Tensor x;
    const Tensor* h = nullptr;
    Backend::PreNorm pre;
    // An observed layer: the trace step the norm's output is (attn_norm, ffn_norm), offered where
    // it is computed (tr null: not observed)
    Trace* tr = nullptr;
    Step step = Step::attn_norm;
    int layer = 0;
    const Batch* b = nullptr;
    bool mtp = false;
  };
  Tensor& normed(Normed& in);  // computes x if it was left
  std::vector<Tensor> project(Normed& in, std::span<const TensorView* const> ws);
  // An output projection; `residual`: plus the residual (Backend::matmul_add), the layer's sum.
  Tensor out_proj(const Tensor& y, const TensorView& w, const Tensor* residual);
  // tap(), then whether the observer replaced t (the ops that already read the old rows must not be used).
  bool tap_replaced(Trace* tr, Step s, int layer, Tensor& t, const Batch& b, bool mtp);
  // The steps a fused op wrote to its tap sink (Backend::TapSink), offered under their trace steps,
  // read-only: a replacement is an InputError naming `op` (the backend op).
  void offer_taps(Trace* tr, Backend::TapSink& sink, std::initializer_list<std::pair<Backend::TapRole, Step>> roles,
                  int l, const Batch& b, bool mtp, const char* op);
  // 7-8 of the gated attention: the sigmoid output gate and o_proj (+ residual) in one op.
  Tensor gated_o_proj(int l, const AttnWeights& aw, const Tensor& a, const Tensor& gate, Batch& b, Trace* tr, bool mtp,
                      const Tensor* residual);
  // The mixers return o_proj / out_proj's output, or with `residual` the residual sum after it.
  Tensor attention_mixer(int l, const AttnWeights& aw, Normed& in, Batch& b, Trace* tr, bool mtp,
                         const LayerNumerics& n, const Tensor* residual);
  Tensor gdn_mixer(int l, const GdnWeights& gw, Normed& in, Batch& b, Trace* tr, const LayerNumerics& n,
                   const Tensor* residual);
  Tensor ffn(int l, const LayerWeights& lw, const Tensor& x, Batch& b, Trace* tr, bool mtp, const LayerNumerics& n);
  Tensor routed_on_host(const MoeWeights& m, const Tensor& x, const Tensor& logits, Batch& b, bool renormalise);
  Tensor mlp(const MlpWeights& mw, const Tensor& x);
  Tensor mlp(const MlpWeights& mw, Normed& in, const Tensor* residual);
  Tensor lm_head(const Tensor& hn, const std::vector<int64_t>& rows, const std::vector<uint8_t>* mask);
  // graphs=on: the key of a decode step that may run as a CUDA graph, "" when it may not.
  std::string graph_key(const Batch& b, const ForwardOptions& fo, Trace* tr) const;
  void tap(Trace* tr, Step s, int layer, Tensor& t, const Batch& b, bool mtp = false);
  void observe(Trace* tr, Step s, int layer, Tensor& t, const Batch& b, bool mtp);
  void tap_tp(Trace* tr, Step s, int layer, Tensor& t, const Batch& b, bool mtp);

  std::shared_ptr<const RankShard> shard_;  // tp > 1: this rank's config and weights
  const ModelConfig& full_cfg_;
  const ModelConfig& cfg_;                  // this rank's (the full config at tp = 1)
  const ModelWeights& w_;                   // this rank's
  Backend& be_;
  EngineOptions opt_;
  int rank_ = 0;
  TpComm* comm_ = nullptr;                  // tp > 1
  TpGroup* group_ = nullptr;                // rank 0 at tp > 1
  std::vector<std::unique_ptr<Engine>> peers_;  // rank 0 at tp > 1: ranks 1..tp-1
  bool skip_last_allreduce_ = false;        // fault tp-skip-last-allreduce
  bool graph_step_ = false;                 // a CUDA graph step is running (forward_rank)
  std::vector<std::pair<Fault, FaultSpec>> faults_;  // the RunConfig's forward-pass faults, checked
  std::vector<int64_t> qkvz_rows_, ba_rows_;  // Qwen3-Next de-interleave permutation (spec §4.7.1)
};

}  // namespace degen
