// The teacher-forced driver (forced_run.h): a token sequence through an engine from a fresh state,
// with layer outputs captured, golden inputs injected or one layer's output patched.
#include "judge/forced_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <span>

#include "util/error.h"

namespace degen {

ForcedRun forced_run(Engine& eng, const std::vector<int32_t>& tokens, const ForcedOptions& o) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const ModelConfig& cfg = eng.config();
  const int L = cfg.num_layers;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  ForcedRun r;
  r.T = o.run_positions < 0 ? static_cast<int64_t>(tokens.size())
                            : std::min<int64_t>(o.run_positions, static_cast<int64_t>(tokens.size()));
  DEGEN_ASSERT(r.T > 0, "forced_run: no tokens");
  if (o.inject) DEGEN_ASSERT(r.T <= o.inject->positions && o.inject->hidden == H, "forced_run: injection covers too few positions");
  if (o.patch_out)
    DEGEN_ASSERT(o.patch_layer >= 0 && o.patch_layer < L && static_cast<int64_t>(o.patch_out->size()) >= r.T * H,
                 "forced_run: the patch covers too few positions");
  DEGEN_ASSERT(o.prefill_positions <= 0 || (o.mode == ForcedMode::decode && !o.inject && !o.mtp),
               "forced_run: prefill_positions is for plain decode-mode runs");
  r.P = std::min(o.capture_positions, r.T);
  const size_t PH = static_cast<size_t>(r.P * H);
  r.l_out.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l)
    if (!o.capture_layers.empty() && o.capture_layers[static_cast<size_t>(l)] && r.P > 0) r.l_out[l].assign(PH, 0.f);
  if (r.P > 0) r.embed.assign(PH, 0.f);
  r.l_out_norm.assign(static_cast<size_t>(L * r.T), 0.f);

  Tensor prenorm;  // l_out-(L-1) for the mtp-prenorm-hidden fault
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.mtp) return;
    const TraceSeq& s = ev.seqs.at(0);
    if (o.mtp_prenorm_hidden && ev.step == Step::l_out && ev.layer == L - 1) prenorm = be.clone(t);
    if (ev.step == Step::l_in && o.inject) {
      const std::vector<float>& g = o.inject->in.at(static_cast<size_t>(ev.layer));
      if (g.empty()) return;
      std::vector<double> v(static_cast<size_t>(s.rows * H));
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t j = 0; j < H; ++j) v[i * H + j] = g[static_cast<size_t>((s.pos0 + i) * H + j)];
      t = be.from_host(v, t.shape, t.dtype);
    } else if (ev.step == Step::l_out) {
      if (ev.layer == o.patch_layer && o.patch_out) {
        std::vector<double> pv(static_cast<size_t>(s.rows * H));
        for (int64_t i = 0; i < s.rows; ++i)
          for (int64_t j = 0; j < H; ++j) pv[static_cast<size_t>(i * H + j)] = (*o.patch_out)[static_cast<size_t>((s.pos0 + i) * H + j)];
        t = be.from_host(pv, t.shape, t.dtype);
      }
      std::vector<float> v = be.to_host_f32(t);
      std::vector<float>& keep = r.l_out[static_cast<size_t>(ev.layer)];
      for (int64_t i = 0; i < s.rows; ++i) {
        const int64_t pos = s.pos0 + i;
        double n2 = 0;
        for (int64_t j = 0; j < H; ++j) n2 += double(v[i * H + j]) * v[i * H + j];
        r.l_out_norm[static_cast<size_t>(ev.layer * r.T + pos)] = static_cast<float>(std::sqrt(n2));
        if (pos < r.P && !keep.empty()) std::copy_n(v.begin() + i * H, H, keep.begin() + pos * H);
      }
    } else if (ev.step == Step::embed && r.P > 0) {
      std::vector<float> v = be.to_host_f32(t);
      for (int64_t i = 0; i < s.rows && s.pos0 + i < r.P; ++i)
        std::copy_n(v.begin() + i * H, H, r.embed.begin() + (s.pos0 + i) * H);
    }
  };

  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.vocab_mask = o.vocab_mask;
  if (o.mode == ForcedMode::prefill) {
    fo.logits = o.logits ? LogitsRows::all : LogitsRows::none;
    fo.keep_hidden = o.mtp && eng.has_mtp();
    std::vector<int32_t> ids(tokens.begin(), tokens.begin() + r.T);
    ForwardOutput out = eng.forward({SeqInput{&st, ids}}, fo, &tr);
    if (o.logits) r.logits = eng.backend().to_host_f32(out.logits);
    if (fo.keep_hidden && r.T >= 2) {
      MtpInput mi;
      mi.state = &st;
      mi.hidden = (o.mtp_prenorm_hidden ? prenorm : out.hidden).slice0(0, r.T - 1);
      mi.next_tokens.assign(ids.begin() + 1, ids.end());
      r.mtp_logits = eng.backend().to_host_f32(eng.mtp({mi}, o.vocab_mask));
    }
  } else {
    fo.logits = o.logits ? LogitsRows::last : LogitsRows::none;
    // The first N tokens in one call, keeping its last row only, as generate() prefills a prompt.
    const int64_t n0 = std::min(std::max<int64_t>(o.prefill_positions, 0), r.T);
    r.logits_pos0 = n0 > 0 ? n0 - 1 : 0;
    if (o.logits) r.logits.reserve(static_cast<size_t>((r.T - r.logits_pos0) * V));
    if (n0 > 0) {
      std::vector<int32_t> ids(tokens.begin(), tokens.begin() + n0);
      ForwardOutput out = eng.forward({SeqInput{&st, ids}}, fo, &tr);
      if (o.logits) r.logits = eng.backend().to_host_f32(out.logits);
    }
    for (int64_t i = n0; i < r.T; ++i) {
      ForwardOutput out = eng.forward({SeqInput{&st, {tokens[static_cast<size_t>(i)]}}}, fo, &tr);
      if (o.logits) {
        std::vector<float> row = eng.backend().to_host_f32(out.logits);
        r.logits.insert(r.logits.end(), row.begin(), row.end());
      }
    }
  }
  r.seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return r;
}

LayerInputs make_layer_inputs(const std::vector<float>& embed, const std::vector<std::vector<float>>& l_out, int64_t P,
                              int64_t H) {
  LayerInputs in;
  in.positions = P;
  in.hidden = H;
  in.in.resize(l_out.size());
  if (P <= 0) return in;
  for (size_t l = 0; l < l_out.size(); ++l) in.in[l] = l == 0 ? embed : l_out[l - 1];
  return in;
}

std::vector<std::optional<metrics::TensorError>> layer_errors(const std::vector<std::vector<float>>& test,
                                                              const std::vector<std::vector<float>>& golden,
                                                              const LayerInputs* inputs) {
  std::vector<std::optional<metrics::TensorError>> e(golden.size());
  for (size_t l = 0; l < golden.size(); ++l) {
    if (golden[l].empty() || l >= test.size() || test[l].size() != golden[l].size()) continue;
    if (inputs && inputs->in.at(l).empty()) continue;  // isolated: the layer's input was not injected
    e[l] = metrics::tensor_error(std::span<const float>(test[l]), std::span<const float>(golden[l]));
  }
  return e;
}

}  // namespace degen
