// compare --dump (dump_compare.h): per case, read the dump, score its logits and its layer outputs
// against the record, measure the known-good run's drift of the same class, name the first layer
// over it and, in that layer, the first step over the known-good run's error at that step.
#include "diag/dump_compare.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <cmath>
#include <map>

#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen {

const std::vector<DumpName>& llama_cpp_dump_names() {
  using H = HeadOrder;
  static const std::vector<DumpName> t = {
      {'M', "model.input_embed", Step::embed, H::same, 0, false, "token embeddings"},
      {'*', "attn_norm", Step::attn_norm, H::same, 0, false, "input_layernorm"},
      // attention layer (models/qwen35.cpp build_layer_attn)
      {'A', "Qcur", Step::attn_q, H::same, 0, false, "query after q_norm and RoPE (its last value)"},
      {'A', "gate_reshaped", Step::attn_gate, H::same, 0, false, "output-gate logits"},
      {'A', "Kcur", Step::attn_k, H::same, 0, false, "key after k_norm and RoPE (its last value)"},
      {'A', "Vcur", Step::attn_v, H::same, 0, false, "value"},
      {'A', "attn_pregate", Step::attn_core, H::same, 0, false, "softmax(qk)v"},
      {'A', "attn_gated", Step::attn_gated, H::same, 0, false, "after the sigmoid gate"},
      {'A', "attn_output", Step::mixer_out, H::same, 0, false, "o_proj"},
      // Gated DeltaNet layer (build_layer_attn_linear, delta-net-base.cpp build_recurrent_attn)
      {'G', "linear_attn_qkv_mixed", Step::gdn_qkv, H::vheads_tiled, 2, true, "in_proj_qkv"},
      {'G', "z", Step::gdn_z, H::vheads_tiled, 0, true, "in_proj_z"},
      {'G', "beta", Step::gdn_b, H::vheads_tiled, 0, false, "in_proj_b"},
      {'G', "alpha", Step::gdn_a, H::vheads_tiled, 0, false, "in_proj_a"},
      {'G', "conv_output_silu", Step::gdn_conv, H::vheads_tiled, 2, true, "causal conv + SiLU"},
      {'G', "q_conv_predelta", Step::gdn_q, H::same, 0, false, "L2-normalised query (scaled by 1/sqrt(d_k) here)", true},
      {'G', "k_conv_predelta", Step::gdn_k, H::same, 0, false, "L2-normalised key"},
      {'G', "gate", Step::gdn_g, H::vheads_tiled, 0, false, "g = -exp(A_log)·softplus(a + dt_bias)"},
      {'G', "beta_sigmoid", Step::gdn_beta, H::vheads_tiled, 0, false, "sigmoid(b)"},
      {'G', "attn_output", Step::gdn_core, H::vheads_tiled, 0, true, "gated delta rule output"},
      {'G', "final_output", Step::gdn_norm, H::vheads_tiled, 0, true, "gated RMSNorm"},
      {'G', "linear_attn_out", Step::mixer_out, H::same, 0, false, "out_proj"},
      // both
      {'*', "attn_residual", Step::h_mid, H::same, 0, false, "residual after the mixer"},
      {'*', "attn_post_norm", Step::ffn_norm, H::same, 0, false, "post_attention_layernorm"},
      {'*', "ffn_out", Step::ffn_out, H::same, 0, false, "MLP"},
      {'*', "l_out", Step::l_out, H::same, 0, false, "layer output"},
      {'M', "result_norm", Step::final_norm, H::same, 0, false, "model.norm"},
  };
  return t;
}

const std::vector<DumpName>& degenbisect_dump_names() {
  static const std::vector<DumpName> t = [] {
    std::vector<DumpName> v;
    for (const StepInfo& s : trace_steps()) {
      if (s.step == Step::l_in || s.step == Step::logits || s.step == Step::mtp_logits) continue;
      if (!s.per_layer && s.step != Step::embed && s.step != Step::final_norm) continue;  // the MTP head
      v.push_back({s.per_layer ? '*' : 'M', s.name, s.step, HeadOrder::same, 0, false, s.what});
    }
    return v;
  }();
  return t;
}

const std::vector<DumpName>& dump_names(const std::string& names) {
  if (names == "llama.cpp") return llama_cpp_dump_names();
  if (names == "degenbisect") return degenbisect_dump_names();
  input_error("a dump named '", names, "': expected 'llama.cpp' or 'degenbisect' names (docs/dump-format.md)");
}

namespace {

// Tiled value heads back to our grouped order: ours[off + (k·r + v)·b + e] = theirs[off + (v·n_k + k)·b + e].
void untile_vheads(DumpRows& x, const ModelConfig& cfg, int64_t off, int64_t block) {
  const int64_t nk = cfg.n_k, r = cfg.r();
  if (off + cfg.n_v * block > x.cols) return;  // not the layout we expect: compared as is (and fails loudly)
  std::vector<float> row(static_cast<size_t>(cfg.n_v * block));
  for (int64_t i = 0; i < x.rows; ++i) {
    float* p = x.v.data() + i * x.cols + off;
    for (int64_t k = 0; k < nk; ++k)
      for (int64_t v = 0; v < r; ++v)
        for (int64_t e = 0; e < block; ++e) row[static_cast<size_t>((k * r + v) * block + e)] = p[(v * nk + k) * block + e];
    std::copy(row.begin(), row.end(), p);
  }
}

// The engine's name of entry n at `layer` (-1: a whole-model entry).
std::string engine_name(const DumpName& n, int layer) {
  return layer < 0 ? std::string(n.engine) : cat(n.engine, "-", layer);
}

// Does entry n apply to layer `layer` (-1: the whole model) of cfg?
bool applies(const DumpName& n, int layer, const ModelConfig& cfg) {
  if ((n.kind == 'M') != (layer < 0)) return false;
  if (n.kind == 'M' || n.kind == '*') return true;
  return n.kind == (cfg.layer_types[static_cast<size_t>(layer)] == LayerKind::full ? 'A' : 'G');
}

// A decimal count written as a metadata string ("52"); nullopt when it is not one.
std::optional<int64_t> decimal_count(const std::string& s) {
  if (s.empty() || s.size() > 18) return std::nullopt;  // 18 digits: below 2^63
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

bool dump_dtype_ok(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

DumpReader::DumpReader(const std::filesystem::path& file, const std::string& case_id, int64_t tokens,
                       const ModelConfig& cfg)
    : cfg_(cfg), T_(tokens) {
  DEGEN_ASSERT(tokens > 0, "a golden sequence has tokens");
  f_ = SafetensorsFile::open(file);
  const std::string where = file.string();
  // 1. Metadata.
  const auto& md = f_->metadata();
  auto meta = [&](const char* k) { auto it = md.find(k); return it == md.end() ? std::string() : it->second; };
  if (meta("format") != "degenbisect-dump")
    input_error(where, ": metadata format '", meta("format"), "', expected 'degenbisect-dump' (docs/dump-format.md)");
  if (meta("names") != "llama.cpp" && meta("names") != "degenbisect")
    input_error(where, ": metadata names '", meta("names"), "': expected 'llama.cpp' or 'degenbisect' (docs/dump-format.md)");
  names_ = &dump_names(meta("names"));
  if (!meta("case").empty() && meta("case") != case_id)
    input_error(where, ": a dump of case '", meta("case"), "', expected '", case_id, "'");
  if (md.count("tokens") && decimal_count(meta("tokens")) != tokens)
    input_error(where, ": metadata tokens '", meta("tokens"), "'; the golden sequence of case '", case_id, "' has ", tokens,
                " tokens (expected that count, in decimal digits)");
  if (meta("mode") == "decode") {
    mode_ = 1;
    const std::optional<int64_t> pt = decimal_count(meta("prompt_tokens"));
    if (!pt || *pt < 1 || *pt > tokens)
      input_error(where, ": metadata mode 'decode' with prompt_tokens '", meta("prompt_tokens"), "'; expected 1 to ", tokens,
                  " in decimal digits (the tokens of the first batch)");
    prompt_tokens_ = *pt;
  } else if (!meta("mode").empty() && meta("mode") != "prefill") {
    input_error(where, ": metadata mode '", meta("mode"), "', expected 'prefill' or 'decode' (docs/dump-format.md)");
  }
  // 2. Tensors: dtype and shape of every tensor this reader may be asked for, before any is read.
  auto check = [&](const std::string& name, std::optional<int64_t> cols) {
    const TensorView* t = f_->find(name);
    if (!t) return;
    if (!dump_dtype_ok(t->dtype))
      input_error(where, ": tensor '", name, "' has dtype ", dtype_name(t->dtype),
                  "; expected F32, F16 or BF16 (a dump holds the engine's float values, docs/dump-format.md)");
    if (t->shape.empty() || t->shape[0] != tokens)
      input_error(where, ": tensor '", name, "' has shape ", shape_str(t->shape), "; expected ", tokens,
                  " rows (one per token of the golden sequence) first");
    if (cols && t->numel() != tokens * *cols)
      input_error(where, ": tensor '", name, "' has shape ", shape_str(t->shape), "; expected [", tokens, ", ", *cols,
                  "] (hidden size ", cfg.hidden_size, ")");
  };
  const TensorView* lg = f_->find("logits");
  if (!lg || lg->shape.size() != 2)
    input_error(where, ": no 'logits' tensor [tokens, vocabulary]",
                lg ? cat(" (found shape ", shape_str(lg->shape), ")") : std::string());
  if (lg->shape[0] != tokens)
    input_error(where, ": logits for ", lg->shape[0], " positions; the golden sequence of case '", case_id, "' has ",
                tokens, " tokens (a dump of another sequence?)");
  if (lg->shape[1] != cfg.vocab_size)
    input_error(where, ": logits over ", lg->shape[1], " ids; the model's vocabulary has ", cfg.vocab_size,
                " (a dump of another model's vocabulary?)");
  check("logits", cfg.vocab_size);
  for (const DumpName& n : *names_)
    for (int l = -1; l < cfg.num_layers; ++l) {
      if (!applies(n, l, cfg)) continue;
      const bool hidden = n.step == Step::embed || n.step == Step::l_out;  // ours is [T, H]
      check(engine_name(n, l), hidden ? std::optional<int64_t>(cfg.hidden_size) : std::nullopt);
    }
  const DumpName l_out{'*', "l_out", Step::l_out, HeadOrder::same, 0, false, ""};
  for (int l = 0; l < cfg.num_layers; ++l) check(engine_name(l_out, l), cfg.hidden_size);
}

DumpReader::~DumpReader() = default;

const std::filesystem::path& DumpReader::path() const { return f_->path(); }

DumpRows DumpReader::rows(const std::string& name) const {
  const TensorView* t = f_->find(name);
  DumpRows r;
  if (!t) return r;
  DEGEN_ASSERT(dump_dtype_ok(t->dtype) && !t->shape.empty() && t->shape[0] == T_, "checked when opened: ", name);
  r.rows = T_;
  r.cols = t->numel() / T_;
  r.v.resize(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < r.v.size(); ++i) r.v[i] = t->at(i);
  return r;
}

std::vector<float> DumpReader::logits() const { return rows("logits").v; }

DumpRows DumpReader::mapped(const DumpName& n, int layer) const {
  DumpRows r = rows(engine_name(n, layer));
  if (!r.v.empty() && n.order == HeadOrder::vheads_tiled)
    untile_vheads(r, cfg_, n.offset_keys * cfg_.d_key(), n.block_is_dv ? cfg_.d_v : 1);
  if (n.scale_q)
    for (float& x : r.v) x = static_cast<float>(x / std::sqrt(static_cast<double>(cfg_.d_k)));
  return r;
}

namespace {

using clock_type = std::chrono::steady_clock;

// The steps of one layer (or l_out of every layer) of a teacher-forced run on our engine.
struct StepCapture {
  std::map<std::pair<int, int>, std::vector<float>> t;  // (step, layer) -> [T, cols]
};

// first_batch: the tokens of the first forward (the whole sequence: prefill; the prompt: decode
// mode, then one forward per token, each step's rows appended in position order).
StepCapture traced_run(Engine& eng, const std::vector<int32_t>& seq, int layer, int64_t first_batch) {
  StepCapture c;
  std::map<std::pair<int, int>, std::vector<float>> call;
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& be) {
    if (ev.mtp) return;
    if (ev.layer == layer || ev.step == Step::l_out || ev.layer < 0)
      call[{static_cast<int>(ev.step), ev.layer}] = be.to_host_f32(t);
  };
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::none;
  const int64_t T = static_cast<int64_t>(seq.size());
  for (int64_t p0 = 0; p0 < T;) {
    const int64_t n = p0 == 0 ? std::min(std::max<int64_t>(first_batch, 1), T) : 1;
    call.clear();
    eng.forward({SeqInput{&st, std::vector<int32_t>(seq.begin() + p0, seq.begin() + p0 + n)}}, fo, &tr);
    for (auto& [k, v] : call) {
      std::vector<float>& dst = c.t[k];
      dst.insert(dst.end(), v.begin(), v.end());
    }
    p0 += n;
  }
  return c;
}

const std::vector<float>* step_of(const StepCapture& c, Step s, int layer) {
  auto it = c.t.find({static_cast<int>(s), layer});
  return it == c.t.end() ? nullptr : &it->second;
}

std::span<const float> first_rows(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return {v.data(), static_cast<size_t>(std::min<int64_t>(rows * cols, static_cast<int64_t>(v.size())))};
}

struct DumpRun {
  const GoldenRecord& rec;
  const Model& model;
  const ModelConfig& cfg;
  const DumpCompareOptions& o;
  std::unique_ptr<Backend> ref_be, floor_be;
  std::unique_ptr<Engine> ref, floor;
  std::vector<uint8_t> mask;
  const std::vector<uint8_t>* maskp = nullptr;
  std::string class_name() const { return o.measured_class ? o.class_name : floor_class_name(o.fclass); }

  DumpRun(const GoldenRecord& r, const Model& m, const Tokenizer* tok, const DumpCompareOptions& opt,
          const BackendFactory& factory)
      : rec(r), model(m), cfg(m.config), o(opt) {
    RunConfig ref_rc, floor_rc;
    const bool golden_fp64 = rec.manifest().settings.fp64();
    ref_rc.precision = golden_fp64 ? Precision::fp64 : Precision::ref;
    // The known-good run of each class, as the record's floors were made (golden.cpp GoldenRun).
    floor_rc.precision = o.fclass == FloorClass::bf16 ? Precision::bf16 : golden_fp64 ? Precision::ref : Precision::fp64;
    if (o.measured_class) floor_rc = *o.measured_class;
    ref_be = factory(ref_rc, cfg);
    ref = std::make_unique<Engine>(cfg, model.weights, *ref_be, engine_options(ref_rc));
    floor_be = factory(floor_rc, cfg);
    floor = std::make_unique<Engine>(cfg, model.weights, *floor_be, engine_options(floor_rc));
    if (tok) mask = tok->padding_mask(cfg.vocab_size);
    maskp = mask.empty() ? nullptr : &mask;
  }
};

// Within layer `layer`: the first mapped step whose error against the reference breaks k·(the
// known-good run's error at that step) + eps. Returns the reason line.
std::string localise_step(DumpRun& run, const DumpReader& f, const std::vector<int32_t>& seq, int layer) {
  const char kind = run.cfg.layer_types[static_cast<size_t>(layer)] == LayerKind::full ? 'A' : 'G';
  const int64_t first = f.mode() == 1 ? f.prompt_tokens() : static_cast<int64_t>(seq.size());
  const StepCapture ref = traced_run(*run.ref, seq, layer, first);
  const StepCapture good = traced_run(*run.floor, seq, layer, first);
  const metrics::FloorRule& rule = run.o.rules.layer;
  std::string within;
  int compared = 0;
  for (const DumpName& n : f.names()) {
    if (n.kind != kind && n.kind != '*') continue;
    const DumpRows d = f.mapped(n, layer);
    const std::vector<float>* r = step_of(ref, n.step, layer);
    const std::vector<float>* g = step_of(good, n.step, layer);
    if (d.v.empty() || !r || !g) continue;
    if (r->size() != d.v.size() || g->size() != r->size()) {
      within += cat("; ", step_name(n.step), ": the engine's '", n.engine, "-", layer, "' has ", d.v.size(),
                    " values, ours ", r->size(), " (not compared)");
      continue;
    }
    ++compared;
    const metrics::TensorError e = metrics::tensor_error(std::span<const float>(d.v), std::span<const float>(*r));
    const double floor = std::max(metrics::tensor_error(std::span<const float>(*g), std::span<const float>(*r)).rel_l2,
                                  run.o.rules.step_floor_min);
    if (!e.passes_nonfinite() || !metrics::floor_pass(e.rel_l2, floor, rule))
      return cat("first step over its floor in layer ", layer, ": ", step_name(n.step), " (the engine's '", n.engine, "-",
                 layer, "', ", n.note, "): rel_l2 ", e.rel_l2, " against the ", run.class_name(),
                 " known-good run's ", floor, " (limit ", rule.k * floor + rule.eps, ")", within);
  }
  return cat("no mapped step of layer ", layer, " is over its floor (", compared,
             " compared): the cause lies between the mapped steps", within);
}

CaseResult dump_case(DumpRun& run, const GoldenCase& g, const std::filesystem::path& file) {
  const auto t0 = clock_type::now();
  const ModelConfig& cfg = run.cfg;
  const int L = cfg.num_layers;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  const std::vector<int32_t> seq = g.sequence();
  const int64_t T = static_cast<int64_t>(seq.size());
  if (!std::filesystem::exists(file))
    input_error("no dump for case '", g.id, "': expected ", file.string(), " (written by llama-dump or a hook script, ",
                "docs/dump-format.md)");
  const DumpReader f(file, g.id, T, cfg);
  const int m = f.mode();  // the record's mode these figures are judged as: 0 prefill, 1 decode
  const int64_t first = m == 1 ? f.prompt_tokens() : T;

  CaseResult cr;
  cr.id = g.id;
  cr.prompt_tokens = static_cast<int64_t>(g.prompt.size());
  cr.positions = T;
  cr.stored_positions = g.P;
  // Logits.
  const std::vector<float> logits = f.logits();
  std::vector<int32_t> next(static_cast<size_t>(T), -1);
  for (int64_t i = 0; i + 1 < T; ++i) next[static_cast<size_t>(i)] = seq[static_cast<size_t>(i + 1)];
  const std::optional<CaseFloors>& floors = g.floors[static_cast<int>(run.o.fclass)];
  std::optional<double> kld_floor = floors ? floors->kld[m] : std::nullopt;
  if (run.o.measured_class) kld_floor = teacher_forced_kld(*run.floor, *run.floor_be, g, V, run.maskp);
  const std::vector<metrics::LogitPosition> pos = logit_positions(logits, T, V, g.topk, next, run.maskp);
  cr.logits[m] = logits_result(pos, kld_floor, run.o.rules.kld, run.o.rules.fallback_kld);
  set_logprob_offset(*cr.logits[m], logits, T, V, g.topk);  // what the engine would report as log-probs
  // Layers: the dump's drift against the known-good run's.
  const StepCapture good = traced_run(*run.floor, seq, -2, first);
  const DumpRows emb = f.mapped(f.names().front(), -1);  // both tables start with the embedding
  if (!emb.v.empty() && !g.embed.empty())
    cr.embed[m] = metrics::tensor_error(first_rows(emb.v, g.P, H), std::span<const float>(g.embed));
  const DumpName l_out{'*', "l_out", Step::l_out, HeadOrder::same, 0, false, ""};
  cr.layers.resize(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    LayerRow& row = cr.layers[static_cast<size_t>(l)];
    row.layer = l;
    row.kind = cfg.layer_types[static_cast<size_t>(l)] == LayerKind::full ? 'A' : 'G';
    const std::vector<float>& gl = g.l_out[static_cast<size_t>(l)];
    const DumpRows d = f.mapped(l_out, l);
    const std::vector<float>* k = step_of(good, Step::l_out, l);
    if (gl.empty() || !k) continue;
    if (d.v.empty()) input_error(file.string(), ": no 'l_out-", l, "' tensor (every layer's output is needed)");
    DEGEN_ASSERT(d.cols == H, "checked when opened");
    row.drift[m] = metrics::tensor_error(first_rows(d.v, g.P, H), std::span<const float>(gl));
    const double floor = metrics::tensor_error(first_rows(*k, g.P, H), std::span<const float>(gl)).rel_l2;
    const metrics::FloorRule& rule = run.o.rules.layer;
    row.floor[m] = floor;
    row.limit[m] = rule.k * floor + rule.eps;
    row.floor_ratio[m] = metrics::floor_ratio(row.drift[m]->rel_l2, floor);
    row.pass[m] = row.drift[m]->passes_nonfinite() && metrics::floor_pass(row.drift[m]->rel_l2, floor, rule);
    if (!row.pass[m] && !cr.first_break) cr.first_break = std::make_pair(m, l);
  }
  // Verdict.
  if (cr.logits[m]->nonfinite > 0) cr.reasons.push_back(cat(cr.logits[m]->nonfinite, " positions with non-finite logits"));
  int64_t beyond = 0;
  double worst = 0;
  for (const metrics::LogitPosition& p : pos)
    if (p.test_out_of_range) {
      ++beyond;
      worst = std::abs(p.test_max_logit) > std::abs(worst) ? p.test_max_logit : worst;
    }
  if (beyond > 0)
    cr.reasons.push_back(cat(beyond, " positions whose largest logit lies beyond ±", metrics::kMaxLogitMagnitude, " (up to ",
                             worst, "): no real model's logits, and float32 cannot resolve a softmax there ",
                             "(metrics.h kMaxLogitMagnitude): counted as the worst KLD"));
  if (cr.first_break) {
    const int l = cr.first_break->second;
    const LayerRow& row = cr.layers[static_cast<size_t>(l)];
    cr.reasons.push_back(cat(m == 1 ? "decode mode: " : "", "first layer over its drift floor: ", l, " (", row.kind == 'A' ? "attention" : "Gated DeltaNet",
                             "), rel_l2 ", row.drift[m]->rel_l2, " = ", *row.floor_ratio[m], " x the ",
                             run.class_name(), " known-good run's drift"));
    cr.reasons.push_back(localise_step(run, f, seq, l));
  }
  if (!cr.logits[m]->pass)
    cr.reasons.push_back(cat("mean KLD ", cr.logits[m]->mean_kld, " over its limit ", cr.logits[m]->limit,
                             cr.logits[m]->floor ? " (k x the record's floor)" : " (fixed limit: no floors of this class)"));
  cr.verdict = cr.reasons.empty() ? metrics::Verdict::good : metrics::Verdict::bad;
  cr.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return cr;
}

}  // namespace

CompareResult compare_dump(const GoldenRecord& rec, const Model& model, const Tokenizer* tok, const DumpCompareOptions& o,
                           const BackendFactory& factory, std::FILE* progress) {
  const auto t0 = clock_type::now();
  CompareResult r;
  r.golden_dir = rec.dir().string();
  r.model_dir = model.dir.string();
  r.suite = rec.suite();
  r.config = cat("dump ", o.dir);
  r.backend = "another engine (its dump)";
  r.source = "dump";
  r.record_fingerprint = rec.model_fingerprint();
  r.model_fingerprint = model.fingerprint;
  check_record(rec, model, tok, o.allow_model_mismatch, r);
  if (!std::filesystem::is_directory(o.dir)) input_error("--dump ", o.dir, ": not a folder");
  r.floor_class = o.measured_class ? o.class_name : floor_class_name(o.fclass);
  r.floors = o.measured_class ? true : rec.floors_present(o.fclass);
  r.floors_reason = o.measured_class ? "" : rec.floors_reason(o.fclass);
  r.limits_note = cat("limits: layers: drift against the drift of a known-good ", r.floor_class,
                      " run measured now (k = 3); logits: ",
                      o.measured_class ? cat("the ", r.floor_class, " known-good run's KLD (our engine at ",
                                             o.measured_class->str(), "; k = 3)")
                      : r.floors       ? cat("the record's ", r.floor_class, " KLD floor (k = 3)")
                                       : cat("the record's ", r.floor_class, " KLD floor is absent: fixed 1e-4 nats"),
                      "; a dump has no isolated errors and no free-running generation");
  const std::vector<size_t> selected = select_cases(rec, o.cases);
  DumpRun run(rec, model, tok, o, factory);
  for (size_t i : selected) {
    const GoldenCase g = rec.load_case(i, true);
    r.cases.push_back(dump_case(run, g, std::filesystem::path(o.dir) / (g.id + ".safetensors")));
    r.verdict = metrics::worst(r.verdict, r.cases.back().verdict);
    if (progress)
      std::fprintf(progress, "compare: dump case %s: %s\n", g.id.c_str(), metrics::verdict_name(r.cases.back().verdict));
  }
  r.limits_note += "\n" + logprob_offset_note(r, model.config.vocab_size, run.mask, "dump");
  r.exit_code = static_cast<int>(metrics::exit_code(r.verdict, false));
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  return r;
}

}  // namespace degen
