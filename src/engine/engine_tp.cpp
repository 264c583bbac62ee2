// The Engine at tp > 1 (engine.h, DESIGN.md §5 `tp`): the peer ranks, the fan-out of each entry
// point over the ranks' threads, and the trace's full-tensor view of rank-local tensors.
// The forward pass itself is engine.cpp's, the same on every rank.
#include <string>
#include <vector>

#include "engine/engine_impl.h"
#include "util/error.h"

namespace degen {

Engine::Engine(const ModelConfig& full, const ModelWeights& full_w, Backend& be, EngineOptions opt,
               std::shared_ptr<const RankShard> shard, int rank, TpComm* comm)
    : shard_(std::move(shard)),
      full_cfg_(full),
      cfg_(shard_->config()),
      w_(shard_->weights()),
      be_(be),
      opt_(std::move(opt)),
      rank_(rank),
      comm_(comm) {
  init();
}

const RankShard* Engine::shard(int rank) const {
  if (rank == 0) return shard_.get();
  DEGEN_ASSERT(rank > 0 && rank <= static_cast<int>(peers_.size()), "shard: no rank ", rank);
  return peers_[static_cast<size_t>(rank - 1)]->shard_.get();
}

Tensor Engine::reduce(const Tensor& t, bool skip) {
  if (!comm_ || skip) return t;
  return comm_->all_reduce(be_, rank_, t);
}

// The state of rank r inside a sequence state made by this engine.
template <typename S>
static S& rank_state(S& s, int r, int tp) {
  if (s.peers.size() != static_cast<size_t>(tp - 1))
    input_error("a sequence state made for tp=", s.peers.size() + 1, " given to an engine of tp=", tp);
  return r == 0 ? s : s.peers[static_cast<size_t>(r - 1)];
}

// Runs fn(rank engine, r) on every rank's thread and nests the results of ranks 1..tp-1 in rank 0's
// `peers` (SeqState and GdnCheckpoint keep their peers' parts that way).
template <typename T, typename F>
T Engine::on_ranks(F fn) {
  std::vector<T> parts(static_cast<size_t>(tp()));
  run_ranks(*group_, [&](int r) { parts[static_cast<size_t>(r)] = fn(rank_engine(r), r); });
  T out = std::move(parts[0]);
  for (int r = 1; r < tp(); ++r) out.peers.push_back(std::move(parts[static_cast<size_t>(r)]));
  return out;
}

SeqState Engine::new_state() {
  if (peers_.empty()) return new_state_rank();
  return on_ranks<SeqState>([](Engine& e, int) { return e.new_state_rank(); });
}

SeqState Engine::snapshot(const SeqState& s) {
  if (peers_.empty()) return snapshot_rank(s);
  return on_ranks<SeqState>([&](Engine& e, int r) { return e.snapshot_rank(rank_state(s, r, tp())); });
}

GdnCheckpoint Engine::checkpoint_gdn(const SeqState& s) {
  if (peers_.empty()) return checkpoint_rank(s);
  return on_ranks<GdnCheckpoint>([&](Engine& e, int r) { return e.checkpoint_rank(rank_state(s, r, tp())); });
}

void Engine::edit_gdn(SeqState& s, const GdnEdit& fn) {
  auto rank = [&](Engine& e, int r, SeqState& rs) {
    for (int l = 0; l < static_cast<int>(rs.gdn.size()); ++l)
      if (!rs.gdn[static_cast<size_t>(l)].S.empty()) fn(e.be_, r, l, rs.gdn[static_cast<size_t>(l)]);
  };
  if (peers_.empty()) return rank(*this, 0, s);
  run_ranks(*group_, [&](int r) { rank(rank_engine(r), r, rank_state(s, r, tp())); });
}

void Engine::edit_gdn2(SeqState& a, SeqState& b, const GdnEdit2& fn) {
  auto rank = [&](Engine& e, int r, SeqState& ra, SeqState& rb) {
    DEGEN_ASSERT(ra.gdn.size() == rb.gdn.size(), "edit_gdn2: states of different models");
    for (int l = 0; l < static_cast<int>(ra.gdn.size()); ++l)
      if (!ra.gdn[static_cast<size_t>(l)].S.empty())
        fn(e.be_, r, l, ra.gdn[static_cast<size_t>(l)], rb.gdn[static_cast<size_t>(l)]);
  };
  if (peers_.empty()) return rank(*this, 0, a, b);
  run_ranks(*group_, [&](int r) { rank(rank_engine(r), r, rank_state(a, r, tp()), rank_state(b, r, tp())); });
}

ForwardOutput Engine::forward(const std::vector<SeqInput>& inputs, const ForwardOptions& fo, Trace* tr) {
  if (peers_.empty()) return forward_rank(inputs, fo, tr);
  if (inputs.empty()) input_error("forward: no sequences given");
  std::vector<std::vector<SeqInput>> in(static_cast<size_t>(tp()));
  for (int r = 0; r < tp(); ++r)
    for (const SeqInput& i : inputs) {
      DEGEN_ASSERT(i.state, "forward: a sequence has no state");
      in[static_cast<size_t>(r)].push_back({&rank_state(*i.state, r, tp()), i.tokens});
    }
  ForwardOptions peer_fo = fo;  // the peers compute no logits: rank 0's are the output
  peer_fo.logits = LogitsRows::none;
  peer_fo.keep_hidden = false;
  ForwardOutput out;
  run_ranks(*group_, [&](int r) {
    if (r == 0) out = forward_rank(in[0], fo, tr);
    else rank_engine(r).forward_rank(in[static_cast<size_t>(r)], peer_fo, tr);
  });
  return out;
}

// ---- §6 MTP head ----
Tensor Engine::mtp(const std::vector<MtpInput>& inputs, const std::vector<uint8_t>* vocab_mask, Trace* tr) {
  if (peers_.empty()) return mtp_rank(inputs, vocab_mask, tr);
  if (w_.mtp.empty()) input_error("this checkpoint has no MTP weights (mtp.*)");
  // The hidden rows are rank 0's: host tensors are shared, device tensors go through the host here,
  // on the calling thread, and onto each peer's device on its own thread.
  std::vector<std::vector<double>> host(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].hidden.device != Device::cpu) host[i] = be_.to_host_f64(inputs[i].hidden);
  Tensor out;
  run_ranks(*group_, [&](int r) {
    std::vector<MtpInput> in = inputs;
    for (size_t i = 0; i < in.size(); ++i) {
      DEGEN_ASSERT(in[i].state, "mtp: a sequence has no state");
      in[i].state = &rank_state(*inputs[i].state, r, tp());
      if (r > 0 && !host[i].empty()) in[i].hidden = rank_engine(r).be_.from_host(host[i], inputs[i].hidden.shape, inputs[i].hidden.dtype);
    }
    if (r == 0) out = mtp_rank(in, vocab_mask, tr);
    else rank_engine(r).mtp_rank(in, vocab_mask, tr);
  });
  return out;
}

// Tracing at tp > 1. Rank 0 calls the observer with the full tensor:
//   - replicated steps (the residual stream, norms, all-reduced outputs, router logits): rank 0's
//     tensor; when the observer replaces it (golden injection), every rank takes the replacement;
//   - rank-local steps (per-head tensors): gathered over the ranks into the tp = 1 layout; the
//     [q | k | v] channels of gdn_qkv / gdn_conv per part; these cannot be replaced;
//   - partial sums (moe_routed, moe_shared): summed over the ranks (in fp64, rounded once).
// logits and mtp_logits are rank 0's alone (the peers do not compute them).
void Engine::tap_tp(Trace* tr, Step s, int layer, Tensor& t, const Batch& b, bool mtp) {
  enum class View { replicated, local, qkv, partial, rank0 };
  View view = View::replicated;
  switch (s) {
    case Step::attn_q: case Step::attn_gate: case Step::attn_k: case Step::attn_v: case Step::attn_core:
    case Step::attn_gated: case Step::gdn_z: case Step::gdn_b: case Step::gdn_a: case Step::gdn_q:
    case Step::gdn_k: case Step::gdn_g: case Step::gdn_beta: case Step::gdn_core: case Step::gdn_norm:
      view = View::local; break;
    case Step::gdn_qkv: case Step::gdn_conv: view = View::qkv; break;
    case Step::moe_routed: case Step::moe_shared: view = View::partial; break;
    case Step::logits: case Step::mtp_logits: view = View::rank0; break;
    default: break;
  }
  if (view == View::rank0) {
    if (rank_ == 0) observe(tr, s, layer, t, b, mtp);
    return;
  }
  const int n = comm_->size();
  if (view == View::replicated) {
    std::vector<double> msg{0.0};  // [replaced?, values...]
    if (rank_ == 0) {
      const Tensor before = t;
      observe(tr, s, layer, t, b, mtp);
      if (t.storage != before.storage || t.offset != before.offset) {
        msg = be_.to_host_f64(t);
        msg.insert(msg.begin(), 1.0);
      }
    }
    comm_->broadcast(rank_, msg);
    if (rank_ != 0 && msg[0] == 1.0) t = be_.from_host(std::vector<double>(msg.begin() + 1, msg.end()), t.shape, t.dtype);
    return;
  }
  std::vector<std::vector<double>> parts = comm_->gather(rank_, be_.to_host_f64(t));
  std::string err;
  if (rank_ == 0) {
    const int64_t rows = t.dim(0), local = t.numel() / std::max<int64_t>(1, rows);
    std::vector<int64_t> shape = t.shape;
    std::vector<double> full;
    if (view == View::partial) {
      full.assign(parts[0].size(), 0.0);
      for (const auto& p : parts)
        for (size_t i = 0; i < p.size(); ++i) full[i] += p[i];
    } else {
      // column segments of one row, in this rank's units: [q | k | v] or the whole row
      std::vector<int64_t> seg = {local};
      if (view == View::qkv) seg = {cfg_.d_key(), cfg_.d_key(), cfg_.d_val()};
      full.reserve(parts[0].size() * static_cast<size_t>(n));
      for (int64_t r = 0; r < rows; ++r) {
        int64_t off = 0;
        for (int64_t w : seg) {
          for (int k = 0; k < n; ++k) {
            const double* src = parts[static_cast<size_t>(k)].data() + r * local + off;
            full.insert(full.end(), src, src + w);
          }
          off += w;
        }
      }
      // the head (or channel) dimension grows n times: [N, h, X] -> [N, n h, X]; [N, c] -> [N, n c]
      shape[shape.size() >= 3 ? 1 : shape.size() - 1] *= n;
    }
    Tensor g = be_.from_host(full, shape, t.dtype);
    const Tensor before = g;
    observe(tr, s, layer, g, b, mtp);
    if (g.storage != before.storage || g.offset != before.offset)
      err = cat("trace observer replaced ", trace_name(s, layer),
                ": at tp > 1 only the replicated steps (residual stream, norms, layer outputs) can be replaced");
  }
  if (!err.empty()) input_error(err);
}

}  // namespace degen
