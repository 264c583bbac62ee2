// Sub-op localisation on one layer (see subop.h).
#include "diag/subop.h"

#include <map>

#include "engine/engine.h"
#include "engine/fused_ops.h"
#include "engine/trace.h"
#include "util/error.h"

namespace degen {

using nlohmann::json;

namespace {

constexpr double kK = 3.0, kEps = 1e-12, kFallback = 1e-4;

// step name -> rows captured in position order (concatenated host copies)
using Capture = std::map<std::string, std::vector<float>>;

Capture capture_layer(const Model& model, const RunConfig& rc, const BackendFactory& factory,
                      const std::vector<int32_t>& tokens, const std::vector<float>& golden_in, int layer, ForcedMode mode) {
  const ModelConfig& cfg = model.config;
  const int64_t H = cfg.hidden_size;
  std::unique_ptr<Backend> be = factory(rc, cfg);
  Engine eng(cfg, model.weights, *be, engine_options(rc));
  Capture cap;
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& b) {
    if (ev.mtp || ev.layer != layer) return;
    const TraceSeq& s = ev.seqs.at(0);
    if (ev.step == Step::l_in) {
      std::vector<double> v(static_cast<size_t>(s.rows * H));
      for (int64_t i = 0; i < s.rows; ++i)
        for (int64_t j = 0; j < H; ++j) v[static_cast<size_t>(i * H + j)] = golden_in[static_cast<size_t>((s.pos0 + i) * H + j)];
      t = b.from_host(v, t.shape, t.dtype);
      return;
    }
    std::vector<float> v = b.to_host_f32(t);
    auto& dst = cap[step_name(ev.step)];
    dst.insert(dst.end(), v.begin(), v.end());
  };
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::none;
  if (mode == ForcedMode::prefill) {
    eng.forward({SeqInput{&st, tokens}}, fo, &tr);
  } else {
    for (int32_t id : tokens) eng.forward({SeqInput{&st, {id}}}, fo, &tr);
  }
  return cap;
}

// The fused op that computes the report's first break, and the steps of it before the break that the
// tested run did not offer (kept inside its kernel) while the reference run did.
void name_fused_op(SubopReport& rep, const Capture& ref, const Capture& tested, const ModelConfig& cfg) {
  if (!rep.first_break) return;
  std::optional<Step> step;
  for (const StepInfo& si : trace_steps())
    if (*rep.first_break == si.name) step = si.step;
  const FusedOp* f = step ? fused_op_of(*step, cfg.layer_types[static_cast<size_t>(rep.layer)],
                                        cfg.is_moe_layer(rep.layer))
                          : nullptr;
  if (!f) return;
  rep.fused_op = fused_op_words(*f);
  for (Step s : f->steps) {
    if (s == *step) break;
    if (ref.count(step_name(s)) && !tested.count(step_name(s))) rep.inside.push_back(step_name(s));
  }
}

}  // namespace

json SubopReport::to_json() const {
  json rs = json::array();
  for (const auto& r : rows)
    rs.push_back({{"step", r.step}, {"rel_l2", metrics::json_number(r.err.rel_l2)}, {"nonfinite", r.err.nonfinite},
                  {"floor", r.floor ? metrics::json_number(*r.floor) : json(nullptr)},
                  {"limit", metrics::json_number(r.limit)}, {"pass", r.pass}});
  return {{"layer", layer}, {"kind", std::string(1, kind)}, {"mode", forced_mode_name(mode)}, {"case", case_id},
          {"positions", positions}, {"floor_config", floor_config}, {"rows", rs},
          {"first_break", first_break ? json(*first_break) : json(nullptr)},
          {"fused_op", fused_op ? json(*fused_op) : json(nullptr)}, {"inside_fused_op", inside}};
}

std::vector<SubopReport> subop_analysis(const GoldenRecord& rec, const Model& model, const RunConfig& tested, int layer,
                                        const BackendFactory& factory, size_t case_index, int64_t max_positions,
                                        SubopCache* cache) {
  const ModelConfig& cfg = model.config;
  if (layer < 0 || layer >= cfg.num_layers) input_error("subop: layer ", layer, " is outside the model");
  if (case_index >= rec.cases().size()) input_error("subop: the record has no case ", case_index);
  GoldenCase gc = rec.load_case(case_index);
  const int64_t H = cfg.hidden_size;
  LayerInputs in = make_layer_inputs(gc.embed, gc.l_out, gc.P, H);
  const std::vector<float>& golden_in = in.in.at(static_cast<size_t>(layer));
  if (golden_in.empty())
    input_error("subop: the golden record does not store the input of layer ", layer,
                " (record it with --layers all, or the previous layer)");
  int64_t P = std::min<int64_t>(gc.P, max_positions);
  std::vector<int32_t> seq = gc.sequence();
  std::vector<int32_t> tokens(seq.begin(), seq.begin() + P);

  RunConfig ref;  // precision=ref, default toggles: the reference itself
  // The floor of the tested configuration's class (golden.h FloorClass), as compare judges it.
  const RunConfig floor_rc =
      RunConfig{}.with_precision(floor_class_for(tested) == FloorClass::fp32 ? Precision::fp64 : Precision::bf16);
  std::vector<SubopReport> out;
  for (ForcedMode mode : {ForcedMode::prefill, ForcedMode::decode}) {
    SubopReport rep;
    rep.layer = layer;
    rep.kind = cfg.layer_types[static_cast<size_t>(layer)] == LayerKind::linear ? 'G' : 'A';
    rep.mode = mode;
    rep.case_id = gc.id;
    rep.positions = P;
    // A run that does not depend on `tested`, from the cache when an earlier call made it.
    auto untested = [&](const RunConfig& rc) {
      if (!cache) return capture_layer(model, rc, factory, tokens, golden_in, layer, mode);
      const std::string key = cat(rc.str(), " case ", case_index, " positions ", P, " layer ", layer, " ",
                                  forced_mode_name(mode));
      if (auto it = cache->captures.find(key); it != cache->captures.end()) return it->second;
      Capture c = capture_layer(model, rc, factory, tokens, golden_in, layer, mode);
      size_t n = 0;
      for (const auto& [step, v] : c) n += v.size();
      if (cache->floats + n <= SubopCache::kMaxFloats) {
        cache->captures.emplace(key, c);
        cache->floats += n;
      }
      return c;
    };
    Capture r = untested(ref);
    Capture t = capture_layer(model, tested, factory, tokens, golden_in, layer, mode);
    std::optional<Capture> f;
    try {
      f = untested(floor_rc);
      rep.floor_config = floor_rc.str();
    } catch (const UntestableError& e) {
      rep.floor_config = cat("none (", e.what(), "); fixed limit rel_l2 <= ", kFallback);
    }
    for (const StepInfo& si : trace_steps()) {
      if (!si.per_layer || si.step == Step::l_in) continue;
      auto rt = r.find(si.name), tt = t.find(si.name);
      if (rt == r.end() || tt == t.end() || rt->second.size() != tt->second.size()) continue;
      SubopRow row;
      row.step = si.name;
      row.err = metrics::tensor_error(std::span<const float>(tt->second), std::span<const float>(rt->second));
      if (f) {
        auto ft = f->find(si.name);
        if (ft != f->end() && ft->second.size() == rt->second.size())
          row.floor = metrics::tensor_error(std::span<const float>(ft->second), std::span<const float>(rt->second)).rel_l2;
      }
      row.limit = row.floor ? kK * *row.floor + kEps : kFallback;
      row.pass = row.err.passes_nonfinite() && row.err.rel_l2 <= row.limit;
      if (!row.pass && !rep.first_break) rep.first_break = row.step;
      rep.rows.push_back(std::move(row));
    }
    name_fused_op(rep, r, t, cfg);
    out.push_back(std::move(rep));
  }
  return out;
}

std::optional<std::string> named_op(const std::vector<SubopReport>& reports) {
  for (const auto& r : reports)
    if (r.mode == ForcedMode::prefill && r.first_break) return r.first_break;
  for (const auto& r : reports)
    if (r.first_break) return r.first_break;
  return std::nullopt;
}

}  // namespace degen
