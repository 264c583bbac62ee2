// The CPU spot checks of what a GPU made for a golden record (golden_run.h): the reference's layers,
// logits and generated tokens, and the bf16 floor runs.
#include <algorithm>
#include <cmath>
#include <span>

#include "judge/result.h"
#include "diag/golden_run.h"
#include "util/error.h"

namespace degen {

namespace {

// The spot checks' inputs: the record's own input of each checked layer (the embedding, or the
// previous layer's output) at the first Nv positions of the run `g` that made it.
LayerInputs checked_layer_inputs(const GoldenRun& run, const ForcedRun& g, int64_t Nv) {
  LayerInputs in;
  in.positions = Nv;
  in.hidden = run.H;
  in.in.resize(static_cast<size_t>(run.L));
  for (int l = 0; l < run.L; ++l)
    if (run.verify_layers[static_cast<size_t>(l)]) {
      const std::vector<float>& src = l == 0 ? g.embed : g.l_out[static_cast<size_t>(l - 1)];
      in.in[static_cast<size_t>(l)].assign(src.begin(), src.begin() + in.positions * run.H);
    }
  return in;
}

// A teacher-forced prefill of those positions that recomputes each checked layer from `in`.
ForcedOptions checked_run(const GoldenRun& run, const LayerInputs& in, bool logits) {
  ForcedOptions fo;
  fo.run_positions = in.positions;
  fo.capture_positions = in.positions;
  fo.capture_layers = run.verify_layers;
  fo.inject = &in;
  fo.logits = logits;
  return fo;
}

// The worst of a series of values (a NaN is worse than anything) and where it was.
struct Worst {
  double value = 0;
  int64_t at = -1;
  void see(double x, int64_t where) {
    if (!(x <= value)) {
      value = x;
      at = where;
    }
  }
};

// log Σ exp(x_j) over the unmasked ids of a logits row, in double.
double masked_lse(const GoldenRun& run, const float* x) {
  double m = -INFINITY, sum = 0;
  for (int64_t j = 0; j < run.V; ++j)
    if (!(run.maskp && run.mask[static_cast<size_t>(j)])) m = std::max(m, double(x[j]));
  for (int64_t j = 0; j < run.V; ++j)
    if (!(run.maskp && run.mask[static_cast<size_t>(j)])) sum += std::exp(double(x[j]) - m);
  return m + std::log(sum);
}

// The checked layers: each one's output recomputed on the CPU from the record's own input against
// the record's, by rel_l2 (into v.layers); the worst and its layer.
Worst check_layers(const GoldenRun& run, const ForcedRun& g, const ForcedRun& cpu, int64_t Nv, CaseVerification& v) {
  Worst worst;
  for (int l = 0; l < run.L; ++l) {
    if (!run.verify_layers[static_cast<size_t>(l)]) continue;
    const std::vector<float>& gpu = g.l_out[static_cast<size_t>(l)];
    const std::span<const float> a(gpu.data(), static_cast<size_t>(Nv * run.H));
    const metrics::TensorError e = metrics::tensor_error(a, std::span<const float>(cpu.l_out[static_cast<size_t>(l)]));
    const double rel = std::isfinite(e.rel_l2) && e.nonfinite == 0 ? e.rel_l2 : INFINITY;
    v.layers.push_back({l, std::isfinite(rel) ? std::optional<double>(rel) : std::nullopt});
    worst.see(rel, l);
  }
  return worst;
}

// The logits: KL(CPU || GPU) over the real vocabulary, in double, at each of the Nv positions; the
// worst and its position.
Worst check_logits(const GoldenRun& run, const ForcedRun& g, const ForcedRun& cpu, int64_t Nv) {
  const int64_t V = run.V;
  Worst worst;
  for (int64_t t = 0; t < Nv; ++t) {
    const float* p = cpu.logits.data() + t * V;
    const float* q = g.logits.data() + t * V;
    const double lp = masked_lse(run, p), lq = masked_lse(run, q);
    double kld = 0;
    for (int64_t j = 0; j < V; ++j) {
      if (run.maskp && run.mask[static_cast<size_t>(j)]) continue;
      const double a = double(p[j]) - lp, b = double(q[j]) - lq;
      kld += std::exp(a) * (a - b);
    }
    if (!std::isfinite(kld)) kld = INFINITY;
    worst.see(kld, t);
  }
  return worst;
}

// The generating path: each step's top-K against the record's teacher-forced logits there; the
// worst KLD and its step. Throws when it is over the fp32 limit.
Worst check_generation(const GoldenRun& run, const std::string& case_id, const std::vector<int32_t>& seq, size_t prompt_len,
                       const GenerateResult& gen, const ForcedRun& g) {
  Worst worst;
  for (size_t s = 0; s < gen.step_topk.size() && prompt_len + s <= seq.size(); ++s) {
    const float* row = g.logits.data() + static_cast<int64_t>(prompt_len - 1 + s) * run.V;
    const double lse = masked_lse(run, row);
    const StepTopK& t = gen.step_topk[s];
    double kld = 0;
    for (size_t i = 0; i < t.ids.size(); ++i) kld += std::exp(t.logprobs[i]) * (t.logprobs[i] - (double(row[t.ids[i]]) - lse));
    if (!std::isfinite(kld)) kld = INFINITY;
    worst.see(kld, static_cast<int64_t>(s));
  }
  if (!(worst.value <= kFallbackKld))
    throw Error(ExitCode::bad,
                cat("golden: the CPU spot check refused the reference ", run.rc.str(), " (", run.be->name(), "): case '", case_id,
                    "': the logits its continuation was generated from (step ", worst.at, ", position ",
                    prompt_len - 1 + static_cast<size_t>(worst.at), ") differ from the record's teacher-forced logits "
                    "there by KLD ", worst.value, " nats (top-", kSpotCheckTopK, "), over the fp32 limit ", kFallbackKld,
                    ": the decode path disagrees with the prefill; no record written"));
  return worst;
}

// The continuation under plain greedy sampling: each generated token against the top-1 of the
// record's own logits. Returns the tokens checked (0 when the sampling is not plain greedy); throws
// on one that is not the top-1 (up to a tie).
int64_t check_greedy(const GoldenRun& run, const std::string& case_id, const SamplingParams& sp,
                     const std::vector<int32_t>& seq, size_t prompt_len, const ForcedRun& g) {
  const int64_t V = run.V;
  const bool greedy = sp.temperature == 0 && sp.repetition_penalty == 1 && sp.presence_penalty == 0;
  int64_t greedy_checked = 0;
  for (size_t i = prompt_len; greedy && i < seq.size(); ++i, ++greedy_checked) {
    const float* row = g.logits.data() + static_cast<int64_t>(i - 1) * V;
    int64_t top = -1;
    for (int64_t j = 0; j < V; ++j)
      if (!(run.maskp && run.mask[static_cast<size_t>(j)]) && (top < 0 || row[j] > row[top])) top = j;
    const double gap = double(row[top]) - double(row[seq[i]]);
    if (!(gap <= kGreedyTieNats))
      throw Error(ExitCode::bad,
                  cat("golden: the CPU spot check refused the reference ", run.rc.str(), " (", run.be->name(), "): case '",
                      case_id, "' is greedy, but its generated token ", i - prompt_len, " (id ", seq[i], ") is not the top-1 of "
                      "the record's own teacher-forced logits at position ", i - 1, " (id ", top, ", ", gap,
                      " nats higher; limit ", kGreedyTieNats, "): the decode path disagrees with the prefill; no record written"));
  }
  return greedy_checked;
}

}  // namespace

// (golden_run.h)
CaseVerification spot_check(GoldenRun& run, const Case& c, const SamplingParams& sp, const std::vector<int32_t>& seq,
                            size_t prompt_len, const GenerateResult& gen, const ForcedRun& g, int64_t Nv) {
  const std::string& case_id = c.id;
  const LayerInputs in = checked_layer_inputs(run, g, Nv);
  const ForcedRun cpu = forced_run(*run.verify_eng, seq, checked_run(run, in, true));
  CaseVerification v;
  const Worst layer = check_layers(run, g, cpu, Nv, v);
  const Worst logits = check_logits(run, g, cpu, Nv);
  const Worst generation = check_generation(run, case_id, seq, prompt_len, gen, g);
  const int64_t greedy_checked = check_greedy(run, case_id, sp, seq, prompt_len, g);
  const int worst_layer = static_cast<int>(layer.at);
  const std::string what = cat("golden: the CPU spot check refused the reference ", run.rc.str(), " (", run.be->name(), "): case '",
                               case_id, "', positions 0-", Nv - 1, ": ");
  if (!(layer.value <= kFallbackRelL2))
    throw Error(ExitCode::bad, cat(what, "layer ", worst_layer, " from the record's own input differs from the CPU reference by rel_l2 ",
                                   layer.value, ", over the fp32 limit ", kFallbackRelL2, "; no record written"));
  if (!(logits.value <= kFallbackKld))
    throw Error(ExitCode::bad, cat(what, "the logits at position ", logits.at, " differ from the CPU reference's by KLD ", logits.value,
                                   " nats, over the fp32 limit ", kFallbackKld, "; no record written"));
  v.by = run.verify_be->name();
  v.positions = Nv;
  v.worst_rel_l2 = layer.value;
  v.worst_layer = worst_layer;
  v.worst_kld = logits.value;
  v.greedy_tokens_checked = greedy_checked;
  v.generation_steps_checked = static_cast<int64_t>(gen.step_topk.size());
  v.worst_generation_kld = generation.value;
  return v;
}

// (golden_run.h)
CaseFloorCheck spot_check_floors(GoldenRun& run, const std::string& case_id, const std::vector<int32_t>& seq,
                                 const ForcedRun& g, int64_t Nv) {
  const int64_t H = run.H;
  const LayerInputs in = checked_layer_inputs(run, g, Nv);
  const ForcedOptions fo = checked_run(run, in, false);
  const ForcedRun gpu = forced_run(*run.floor_eng[0], seq, fo);
  const ForcedRun emu = forced_run(*run.floor_check_eng, seq, fo);
  double worst = 0;
  int worst_layer = -1;
  CaseFloorCheck fc;
  for (int l = 0; l < run.L; ++l) {
    if (!run.verify_layers[static_cast<size_t>(l)]) continue;
    const std::span<const float> rec(g.l_out[static_cast<size_t>(l)].data(), static_cast<size_t>(Nv * H));
    const double d = metrics::tensor_error(gpu.l_out[static_cast<size_t>(l)], emu.l_out[static_cast<size_t>(l)]).rel_l2;
    const double e = metrics::tensor_error(emu.l_out[static_cast<size_t>(l)], rec).rel_l2;
    const double ratio = e > 0 ? d / e : (d > 0 ? INFINITY : 0.0);
    fc.layers.push_back({l, d, e});
    if (!(d <= kFloorCheckK * e + kFloorCheckEps))
      throw Error(ExitCode::bad,
                  cat("golden: the CPU spot check refused the bf16 noise floors made on ", run.floor_rc[0].str(), " (",
                      run.floor_be[0]->name(), "): case '", case_id, "', layer ", l, " at positions 0-", Nv - 1,
                      ": the GPU's bf16 output differs from the CPU's emulation of GPU storage by rel_l2 ", d, ", over ",
                      kFloorCheckK, " x the emulation's own error ", e, "; no record written"));
    if (!(ratio <= worst)) {
      worst = ratio;
      worst_layer = l;
    }
  }
  fc.by = run.floor_check_be->name();
  fc.positions = Nv;
  fc.worst_ratio = worst;
  fc.worst_layer = worst_layer;
  return fc;
}

}  // namespace degen
