// The writer of golden records (golden.h for the record layout): write_golden runs every case of the
// suite (generation, the teacher-forced prefill, the noise floors; the CPU spot checks of a GPU
// reference in golden_spot_check.cpp), builds the Manifest and hands the files to the record store.
#include "diag/golden.h"
#include "util/cpu_isa.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "build_config.h"
#include "judge/result.h"
#include "diag/golden_plan.h"
#include "diag/golden_run.h"
#include "judge/metrics.h"
#include "engine/generate.h"
#include "model/chat_template.h"
#include "model/safetensors.h"
#include "util/file_io.h"
#include "model/tokenizer.h"
#include "util/error.h"
#include "util/sha256.h"

namespace degen {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<bool> parse_layer_list(const std::string& text, const ModelConfig& cfg) {
  std::vector<bool> out(static_cast<size_t>(cfg.num_layers), false);
  if (text == "all") return std::vector<bool>(out.size(), true);
  if (text == "none") return out;
  std::string scope = text;
  std::replace(scope.begin(), scope.end(), ',', '+');
  LayerScope s;
  try {
    s = LayerScope::parse(scope, "--layers");
  } catch (const InputError&) {
    input_error("--layers ", text, ": expected all, none, or layers and ranges such as 0,3,5-7 (or linear, full)");
  }
  for (const auto& r : s.ranges)
    if (r.b >= cfg.num_layers)
      input_error("--layers ", text, ": layer ", r.b, " is outside the model (layers 0..", cfg.num_layers - 1, ")");
  for (int l : s.layers(cfg.num_layers, &cfg)) out[static_cast<size_t>(l)] = true;
  return out;
}

// ---- writing ----

int64_t golden_positions(const std::string& policy, int64_t T, int64_t per_position_bytes) {
  if (policy == "all") return T;
  if (policy == "none") return 0;
  if (policy == "auto")
    return per_position_bytes == 0 ? T : std::min<int64_t>(T, kAutoLayerBytesPerCase / per_position_bytes);
  return std::min<int64_t>(T, std::stoll(policy));  // validated before
}

namespace {

void validate_positions(const std::string& p) {
  if (!valid_positions_policy(p))
    input_error("--positions ", p, ": expected auto, all, none or a number N (the first N positions of each case)");
}

void add_i32(SafetensorsWriter& w, const std::string& name, const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  w.add(name, DType::i32, shape, v.data(), v.size() * 4);
}
void add_f32(SafetensorsWriter& w, const std::string& name, const std::vector<float>& v, std::vector<int64_t> shape) {
  w.add(name, DType::f32, shape, v.data(), v.size() * 4);
}

// A mean KLD as a noise floor: a mean below 0 is rounding (each position's KLD may be down to
// -kKldRoundoff, metrics.h), so the floor is 0 there, as the manifest's reader requires (>= 0:
// record_manifest.cpp); NaN stays NaN.
double kld_floor(double mean) { return mean < 0 ? 0.0 : mean; }

// Floors of one case for one floor engine: isolated rel_l2 per layer and mode, mean teacher-forced
// KLD per mode, MTP draft KLD (prefill).
CaseFloors measure_floors(Engine& eng, const std::vector<int32_t>& seq, const ForcedRun& g, const std::vector<bool>& stored,
                          const TopKBlock& main_k, const TopKBlock& mtp_k, const std::vector<uint8_t>* maskp) {
  const ModelConfig& cfg = eng.config();
  const int L = cfg.num_layers;
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size, T = static_cast<int64_t>(seq.size()), P = g.P;
  const LayerInputs in = make_layer_inputs(g.embed, g.l_out, P, H);
  std::vector<int32_t> next(seq.begin() + 1, seq.end());
  next.push_back(-1);
  std::vector<int32_t> mtp_next;
  for (int64_t i = 0; i + 1 < T; ++i) mtp_next.push_back(i + 2 < T ? seq[static_cast<size_t>(i + 2)] : -1);
  CaseFloors f;
  for (ForcedMode m : {ForcedMode::prefill, ForcedMode::decode}) {
    const int mi = static_cast<int>(m);
    if (P > 0) {
      ForcedOptions io;
      io.mode = m;
      io.run_positions = P;
      io.capture_positions = P;
      io.capture_layers = stored;
      io.inject = &in;
      io.logits = false;
      ForcedRun iso = forced_run(eng, seq, io);
      for (auto& e : layer_errors(iso.l_out, g.l_out, &in)) f.iso[mi].push_back(e ? std::optional<double>(e->rel_l2) : std::nullopt);
    } else {
      f.iso[mi].assign(static_cast<size_t>(L), std::nullopt);
    }
    ForcedOptions to;
    to.mode = m;
    to.vocab_mask = maskp;
    to.mtp = m == ForcedMode::prefill && !mtp_k.ids.empty();
    ForcedRun tf = forced_run(eng, seq, to);
    f.kld[mi] = kld_floor(mean_kld(logit_positions(tf.logits, T, V, main_k, next, maskp)));
    if (m == ForcedMode::prefill && !tf.mtp_logits.empty())
      f.mtp_kld = kld_floor(mean_kld(logit_positions(tf.mtp_logits, T - 1, V, mtp_k, mtp_next, maskp)));
  }
  return f;
}

}  // namespace

Case golden_case(const GoldenOptions& opt, const Case& suite_case) {
  Case c = suite_case;
  if (opt.gen_tokens) c.max_new_tokens = *opt.gen_tokens;
  return c;
}

std::vector<std::pair<size_t, size_t>> golden_batch_groups(const Suite& suite, const GoldenOptions& opt) {
  std::vector<std::pair<size_t, size_t>> g;
  auto same = [&](const Case& a0, const Case& b0) {
    const Case a = golden_case(opt, a0), b = golden_case(opt, b0);
    return sampling_str(case_sampling(a, SamplingParams{})) == sampling_str(case_sampling(b, SamplingParams{})) &&
           a.max_new_tokens == b.max_new_tokens && a.ignore_stop == b.ignore_stop;
  };
  for (size_t i = 0; i < suite.cases.size();) {
    size_t j = i + 1;
    while (opt.batch_all && j < suite.cases.size() && same(suite.cases[i], suite.cases[j])) ++j;
    g.emplace_back(i, j);
    i = j;
  }
  return g;
}

GoldenRun::GoldenRun(const Model& model_, const Tokenizer* tok_, const GoldenOptions& opt_, const BackendFactory& factory,
                   GoldenSummary& sum)
    : model(model_), tok(tok_), opt(opt_), cfg(model_.config), L(cfg.num_layers), H(cfg.hidden_size),
      V(cfg.vocab_size), stored(parse_layer_list(opt_.layers, cfg)),
      n_stored(static_cast<int>(std::count(stored.begin(), stored.end(), true))) {
  rc = opt.reference;
  if (rc.backend == BackendKind::cpu) rc.precision = opt.precision;
  be = factory(rc, cfg);
  eng = std::make_unique<Engine>(cfg, model.weights, *be, engine_options(rc));
  if (tok) {
    mask = tok->padding_mask(V);
    stops = stop_token_ids(model.dir / "generation_config.json", *tok);
  } else {
    for (int64_t e : cfg.eos_token_ids) stops.push_back(static_cast<int32_t>(e));
  }
  maskp = mask.empty() ? nullptr : &mask;
  const int real_ids = static_cast<int>(V - std::count(mask.begin(), mask.end(), uint8_t(1)));
  K = std::min(opt.topk, real_ids);
  const bool gpu_floors = opt.floors && opt.floor_classes != "fp32" && opt.bf16_floors.backend != BackendKind::cpu;
  if ((rc.backend != BackendKind::cpu || gpu_floors) && opt.verify_layers != "none" && opt.verify_positions > 0) {
    verify_layers = parse_layer_list(opt.verify_layers, cfg);
    const bool any = std::count(verify_layers.begin(), verify_layers.end(), true) > 0;
    verify = any && rc.backend != BackendKind::cpu;
    verify_floors = any && gpu_floors;
  }
  if (verify) {
    verify_be = factory(verify_rc, cfg);  // the CPU reference (precision=ref)
    verify_eng = std::make_unique<Engine>(cfg, model.weights, *verify_be, engine_options(verify_rc));
  }
  if (verify_floors) {
    RunConfig emu;
    emu.precision = Precision::bf16;  // the CPU's emulation of GPU storage
    floor_check_be = factory(emu, cfg);
    floor_check_eng = std::make_unique<Engine>(cfg, model.weights, *floor_check_be, engine_options(emu));
  }
  floor_rc[0] = opt.bf16_floors;
  if (floor_rc[0].backend == BackendKind::cpu) floor_rc[0].precision = Precision::bf16;
  floor_rc[1].precision = opt.precision == Precision::fp64 ? Precision::ref : Precision::fp64;
  for (int fc = 0; fc < 2; ++fc) {
    if (!opt.floors) {
      sum.floors_reason[fc] = "not measured (--no-floors)";
      continue;
    }
    if (opt.floor_classes != "both" && opt.floor_classes != floor_class_name(static_cast<FloorClass>(fc))) {
      sum.floors_reason[fc] = cat("not measured (--floor-classes ", opt.floor_classes, ")");
      continue;
    }
    try {
      floor_be[fc] = factory(floor_rc[fc], cfg);
      floor_eng[fc] = std::make_unique<Engine>(cfg, model.weights, *floor_be[fc], engine_options(floor_rc[fc]));
      sum.floors[fc] = true;
    } catch (const UntestableError& e) {
      sum.floors_reason[fc] = e.what();
    }
  }
}

namespace {

// The options golden refuses whatever the model (check_golden_options adds the layer lists).
void check_option_values(const GoldenOptions& opt) {
  if (opt.precision == Precision::bf16)
    input_error("golden: --precision must be fp32 or fp64 (the reference); bf16 is what the noise floors measure");
  if (opt.topk < 1 || opt.topk > kMaxRecordTopK) input_error("golden: --topk must be in [1, ", kMaxRecordTopK, "], found ", opt.topk);
  if (opt.gen_tokens && (*opt.gen_tokens < 0 || *opt.gen_tokens > kMaxNewTokensLimit))
    input_error("golden: --gen-tokens must be in [0, ", kMaxNewTokensLimit, "], found ", *opt.gen_tokens);
  validate_positions(opt.positions);
  const RunConfig& r = opt.reference;
  if (r.backend == BackendKind::cuda) {
    if (!r.cuda_reference())
      input_error("golden: --config ", r.str(), " is the bf16 GPU path, not a reference; the reference on the GPU is "
                  "backend=cuda,precision=ref");
    if (opt.precision != Precision::ref)
      input_error("golden: --precision fp64 runs on the CPU only; the reference on the GPU is fp32 (precision=ref)");
  } else if (r.precision_set && r.precision != Precision::ref && r.precision != Precision::fp64) {
    input_error("golden: --config precision=", r.str(), ": the reference is precision=ref (fp32) or fp64 (--precision)");
  }
  // Only what leaves the reference's numerics as they are: the backend, precision=ref and the GPU's
  // way of running it (tp, gemm, graphs); faults to test the spot check.
  RunConfig neutral = r;
  neutral.backend = BackendKind::cpu;
  neutral.precision = Precision::ref;
  neutral.precision_set = false;
  neutral.tp = 1;
  neutral.gemm.reset();
  neutral.graphs.reset();
  neutral.faults.clear();
  if (neutral.str() != RunConfig{}.str())
    input_error("golden: --config ", r.str(), ": ", neutral.str(), " would change the reference's numerics; --config takes "
                "backend, precision=ref, tp, gemm and graphs (and faults, to test the spot check)");
  if (r.backend == BackendKind::cpu && !r.faults.empty())
    input_error("golden: --config fault=... on the CPU would make a wrong golden record; faults are allowed only with "
                "backend=cuda,precision=ref, to show that the CPU spot check refuses them");
  const RunConfig& bf = opt.bf16_floors;
  const bool gpu_floors = bf.backend != BackendKind::cpu;
  if (gpu_floors) {
    RunConfig n2 = bf;
    n2.backend = BackendKind::cpu;
    n2.tp = 1;
    n2.gemm.reset();
    n2.graphs.reset();
    n2.faults.clear();  // to show that the spot check refuses them
    if (bf.cuda_reference() || n2.str() != RunConfig{}.str())
      input_error("golden: --floors-config ", bf.str(), ": the bf16 floors run on precision=bf16 (the CPU's emulation) or "
                  "backend=cuda (the bf16 GPU path; tp, gemm and graphs allowed)");
  } else if (bf.str() != "precision=bf16") {
    input_error("golden: --floors-config ", bf.str(), ": the bf16 floors run on precision=bf16 (the CPU's emulation) or "
                "backend=cuda (the bf16 GPU path)");
  }
  if (opt.floor_classes != "both" && opt.floor_classes != "bf16" && opt.floor_classes != "fp32")
    input_error("golden: --floor-classes ", opt.floor_classes, ": expected both, bf16 or fp32");
  if (r.backend == BackendKind::cpu && !gpu_floors && (opt.verify_layers != "all" || opt.verify_positions != 4))
    input_error("golden: --verify-layers and --verify-positions check what runs on the GPU (--config "
                "backend=cuda,precision=ref, --floors-config backend=cuda) against the CPU");
  if (gpu_floors && opt.floors && (opt.verify_layers == "none" || opt.verify_positions == 0))
    input_error("golden: --floors-config backend=cuda needs the CPU spot check (--verify-layers, --verify-positions)");
  if (opt.verify_positions < 0 || opt.verify_positions > kMaxVerifyPositions)
    input_error("golden: --verify-positions must be in [0, ", kMaxVerifyPositions, "], found ", opt.verify_positions);
  if (!r.faults.empty() && (opt.verify_layers == "none" || opt.verify_positions == 0))
    input_error("golden: a reference with faults is only run to test the spot check; --verify-layers none or "
                "--verify-positions 0 would let it write a wrong record");
}

// One case of the record, written as TMP/ID.safetensors: 1. the continuation, through the
// generation loop; 2. one teacher-forced prefill over prompt + continuation (top-K, stored layers,
// MTP top-K); 3. the noise floors of each class against it. Returns the case's manifest entry.
// Progress inside a case on a large model (stderr): once the case has run 10 s, a line per phase and,
// at most every 10 s, one on the generation steps with the time left.
struct CaseProgress {
  using clock = std::chrono::steady_clock;
  bool on = false;
  std::string what;
  int total = 0, steps = 0;
  clock::time_point t0 = clock::now(), last = clock::now();
  double since(clock::time_point t) const { return std::chrono::duration<double>(clock::now() - t).count(); }
  void step() {
    ++steps;
    if (!on || since(t0) < 10 || since(last) < 10) return;
    last = clock::now();
    const double per = since(t0) / steps;
    std::fprintf(stderr, "golden: %s: generation step %d of at most %d, %.1f s per step, about %s left of it\n", what.c_str(),
                 steps, total, per, format_duration(per * std::max(total - steps, 0)).c_str());
  }
  // Inside a pass (a long prefill): the layer it has reached, at most every 10 s.
  void layer(int l, int L) {
    if (!on || since(t0) < 10 || since(last) < 10) return;
    last = clock::now();
    std::fprintf(stderr, "golden: %s: step %d, layer %d of %d (%s into it)\n", what.c_str(), steps + 1, l + 1, L,
                 format_duration(since(t0)).c_str());
  }
  void phase(const std::string& p) const {
    if (on && since(t0) >= 10) std::fprintf(stderr, "golden: %s: %s (%s into the case)\n", what.c_str(), p.c_str(), format_duration(since(t0)).c_str());
  }
};

// The generation settings of a case of the record (first_case: the sampler's case index of prompt 0).
GenerateOptions golden_generate_options(const GoldenRun& run, const Case& c, size_t first_case) {
  GenerateOptions go;
  go.max_new_tokens = c.max_new_tokens;
  if (!c.ignore_stop) go.stop_ids = run.stops;
  go.sampling = case_sampling(c, SamplingParams{});
  go.vocab_mask = run.maskp;
  go.first_case = static_cast<uint32_t>(first_case);
  if (run.verify) go.keep_topk = kSpotCheckTopK;  // the spot check of the generating path
  return go;
}

// --batch all: the continuations of cases [b, e) of one batch group, generated together (one pass
// over the weights per step for all of them).
std::vector<GenerateResult> generate_batch(GoldenRun& run, const Suite& suite, size_t b, size_t e, bool progress) {
  const Case c0 = golden_case(run.opt, suite.cases[b]);
  GenerateOptions go = golden_generate_options(run, c0, b);
  go.check_finite = true;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = b; i < e; ++i) prompts.push_back(encode_case(golden_case(run.opt, suite.cases[i]), run.tok, run.cfg).ids);
  if (go.max_new_tokens <= 0) return std::vector<GenerateResult>(e - b);
  CaseProgress cp{progress, cat("cases ", b + 1, "-", e), go.max_new_tokens};
  Trace watch;
  watch.observer = [&](const TraceEvent& ev, Tensor&, Backend&) {
    if (ev.step == Step::logits && !ev.mtp) cp.step();
    if (ev.step == Step::l_out && !ev.mtp) cp.layer(ev.layer, run.L);
  };
  return generate(*run.eng, prompts, go, &watch);
}

// What one case of the record leaves: its manifest entry, its data file, and the line the CLI prints.
struct CaseResult {
  Manifest::Case entry;
  std::string file, sha256, line;
  uint64_t bytes = 0;
};

// 1. The continuation of case `c` through the generation loop (made already with the case's batch
// group under --batch all: `pre`), and whether the reference saw non-finite logits making it.
GenerateResult generate_case(GoldenRun& run, const Case& c, size_t ci, const CasePrompt& cp, CaseProgress& prog,
                             const GenerateResult* pre) {
  const GenerateOptions go = golden_generate_options(run, c, ci);
  bool nonfinite = pre && pre->nonfinite_logits;
  Trace watch;
  watch.logits_only = !prog.on;  // (the layer events only to say how far a long pass has got)
  watch.observer = [&](const TraceEvent& ev, Tensor& t, Backend& b) {
    if (ev.step == Step::l_out && !ev.mtp) prog.layer(ev.layer, run.L);
    if (ev.step == Step::logits && !ev.mtp) prog.step();
    if (ev.step != Step::logits || nonfinite) return;
    std::vector<float> v = b.to_host_f32(t);
    for (size_t j = 0; j < v.size(); ++j)
      if (!std::isfinite(v[j]) && !(v[j] < 0 && run.maskp && run.mask[j % run.V])) nonfinite = true;
  };
  GenerateResult gen;
  if (pre) gen = *pre;
  else if (c.max_new_tokens > 0) gen = generate(*run.eng, {cp.ids}, go, &watch).at(0);
  gen.nonfinite_logits = nonfinite;
  return gen;
}

// 2. One teacher-forced prefill over prompt + continuation (top-K, stored layers, MTP top-K), with
// the spot checks of what a GPU made (their results into `entry`); returns the run trimmed to what
// the record keeps: the stored layers at the first P positions.
ForcedRun teacher_forced(GoldenRun& run, const Case& c, const CasePrompt& cp, const GenerateResult& gen,
                         const std::vector<int32_t>& seq, int64_t P, CaseProgress& prog, Manifest::Case& entry) {
  const int64_t H = run.H, T = static_cast<int64_t>(seq.size());
  // with the spot check, also the layers and positions it checks
  const int64_t Nv = run.verify || run.verify_floors ? std::min<int64_t>(run.opt.verify_positions, T) : 0;
  ForcedOptions fo;
  fo.capture_positions = std::max(P, Nv);
  fo.capture_layers = run.stored;
  for (int l = 0; l < run.L && Nv > 0; ++l)
    if (run.verify_layers[static_cast<size_t>(l)]) {
      fo.capture_layers[static_cast<size_t>(l)] = true;
      if (l > 0) fo.capture_layers[static_cast<size_t>(l - 1)] = true;  // its input
    }
  fo.mtp = true;
  // note: no vocab_mask: the padding rows keep their logits so that lse_pad (from lse to what other
  // engines normalise by) can be computed; topk_block masks them for the top-K and lse (same values).
  prog.phase(cat("teacher-forced prefill of ", T, " tokens"));
  ForcedRun g = forced_run(*run.eng, seq, fo);
  if (Nv > 0 && run.verify) {
    prog.phase(cat("CPU spot check of ", Nv, " positions"));
    entry.verification = spot_check(run, c, case_sampling(c, SamplingParams{}), seq, cp.ids.size(), gen, g, Nv);
  }
  if (Nv > 0 && run.verify_floors) {
    prog.phase(cat("CPU spot check of the GPU's bf16 floor run at ", Nv, " positions"));
    entry.floor_check = spot_check_floors(run, c.id, seq, g, Nv);
  }
  g.P = P;
  g.embed.resize(static_cast<size_t>(P * H));
  for (int l = 0; l < run.L; ++l) {
    std::vector<float>& v = g.l_out[static_cast<size_t>(l)];
    if (!run.stored[static_cast<size_t>(l)] || P == 0) v.clear();
    else v.resize(static_cast<size_t>(P * H));
  }
  return g;
}

// The case's data file (golden.h): tokens, the top-K of the teacher-forced logits and of the MTP
// drafts, the stored layers and every layer's norms; the top-K blocks are kept for the floors.
SafetensorsWriter case_data(const GoldenRun& run, const Case& c, const CasePrompt& cp, const GenerateResult& gen,
                            const ForcedRun& g, TopKBlock& main_k, TopKBlock& mtp_k) {
  const int64_t H = run.H, T = g.T, P = g.P;
  SafetensorsWriter w;
  w.set_metadata("format", kGoldenFormat);
  w.set_metadata("case", c.id);
  w.set_metadata("model_fingerprint", run.model.fingerprint);
  add_i32(w, "prompt", cp.ids, {static_cast<int64_t>(cp.ids.size())});
  add_i32(w, "continuation", gen.tokens, {static_cast<int64_t>(gen.tokens.size())});
  auto topk_checked = [&](const std::vector<float>& logits, int64_t rows, bool mtp) {
    TopKBlock b = topk_block(logits, rows, run.V, run.maskp, run.K);
    if (b.undefined_row >= 0)
      input_error("golden: case '", c.id, "': the reference's ", mtp ? "MTP " : "", "logits at position ",
                  b.undefined_row, " are not a distribution (NaN or +inf); the checkpoint is broken "
                  "(try `degenbisect run --check-weights`)");
    return b;
  };
  main_k = topk_checked(g.logits, T, false);
  add_i32(w, "topk_ids", main_k.ids, {T, run.K});
  add_f32(w, "topk_logprobs", main_k.logprobs, {T, run.K});
  add_f32(w, "lse", main_k.lse, {T});
  add_f32(w, "lse_pad", main_k.lse_pad, {T});
  if (!g.embed.empty()) add_f32(w, "embed", g.embed, {P, H});
  for (int l = 0; l < run.L; ++l)
    if (!g.l_out[l].empty()) add_f32(w, trace_name(Step::l_out, l), g.l_out[l], {P, H});
  add_f32(w, "l_out_norm", g.l_out_norm, {run.L, T});
  if (!g.mtp_logits.empty()) {
    mtp_k = topk_checked(g.mtp_logits, T - 1, true);
    add_i32(w, "mtp_topk_ids", mtp_k.ids, {T - 1, run.K});
    add_f32(w, "mtp_topk_logprobs", mtp_k.logprobs, {T - 1, run.K});
    add_f32(w, "mtp_lse", mtp_k.lse, {T - 1});
    add_f32(w, "mtp_lse_pad", mtp_k.lse_pad, {T - 1});
  }
  return w;
}

// One case of the record, written as TMP/ID.safetensors: 1. the continuation, through the
// generation loop; 2. one teacher-forced prefill over prompt + continuation (top-K, stored layers,
// MTP top-K); 3. the noise floors of each class against it.
CaseResult record_case(GoldenRun& run, const Case& suite_case, size_t ci, const fs::path& tmp, std::FILE* progress,
                       const GenerateResult* pre = nullptr) {
  const Case c = golden_case(run.opt, suite_case);
  const CasePrompt cp = encode_case(c, run.tok, run.cfg);
  CaseProgress prog{progress != nullptr, cat("case '", c.id, "'"), c.max_new_tokens};
  const GenerateResult gen = generate_case(run, c, ci, cp, prog, pre);
  std::vector<int32_t> seq = cp.ids;
  seq.insert(seq.end(), gen.tokens.begin(), gen.tokens.end());
  const int64_t T = static_cast<int64_t>(seq.size());
  const int64_t P = run.n_stored == 0 ? 0 : golden_positions(run.opt.positions, T, (run.n_stored + 1) * run.H * 4);
  CaseResult r;
  Manifest::Case& e = r.entry;
  const ForcedRun g = teacher_forced(run, c, cp, gen, seq, P, prog, e);
  TopKBlock main_k, mtp_k;
  SafetensorsWriter w = case_data(run, c, cp, gen, g, main_k, mtp_k);
  // 3. noise floors: each class's run against this record (isolated, then teacher-forced)
  for (int fc = 0; fc < 2; ++fc) {
    if (!run.floor_eng[fc]) continue;
    prog.phase(cat(floor_class_name(static_cast<FloorClass>(fc)), " noise floors"));
    e.floors[fc] = measure_floors(*run.floor_eng[fc], seq, g, run.stored, main_k, mtp_k, run.maskp);
  }
  r.file = c.id + ".safetensors";
  w.write(tmp / r.file);
  const std::string bytes = read_file(tmp / r.file);
  r.bytes = bytes.size();
  r.sha256 = sha256_hex(bytes);

  metrics::ContentOptions content;
  if (run.tok && cp.opened_think) content.think_end = run.tok->token_id("</think>");
  content.stop_ids = run.stops;
  metrics::Degeneration dg = metrics::degeneration(gen.tokens, metrics::DegenRules{}, gen.nonfinite_logits, content);
  const SamplingParams sp = case_sampling(c, SamplingParams{});
  e.id = c.id;
  e.index = static_cast<int>(ci);
  e.input = case_input_name(c.input);
  e.opened_think = cp.opened_think;
  e.max_new_tokens = c.max_new_tokens;
  e.ignore_stop = c.ignore_stop;
  e.sampling = sampling_str(sp);
  e.prompt_tokens = static_cast<int64_t>(cp.ids.size());
  e.generated_tokens = static_cast<int64_t>(gen.tokens.size());
  e.stop_reason = c.max_new_tokens > 0 ? stop_reason_name(gen.reason) : "no budget";
  e.nonfinite_logits = gen.nonfinite_logits;
  e.positions_stored = P;
  e.file = r.file;
  e.degeneration = dg.to_json();
  r.line = cat("case ", c.id, ": ", cp.ids.size(), " prompt + ", gen.tokens.size(), " generated tokens (", e.stop_reason,
               "), ", P, " of ", T, " positions stored, ", (bytes.size() + 512) / 1024, " KiB",
               dg.degenerate ? cat(", degenerate (", *dg.rule, ")") : "");
  if (progress) std::fprintf(progress, "golden: %s\n", r.line.c_str());
  return r;
}

// ---- the manifest ----

// The manifest's parts known when the run starts (golden.h): tool, command, model, tokenizer, suite,
// reference settings and the noise-floor classes; the resume key is made from them.
Manifest manifest_head(const GoldenRun& run, const Suite& suite, const GoldenSummary& sum) {
  const GoldenOptions& opt = run.opt;
  Manifest m;
  m.format = kGoldenFormat;
  m.format_version = kGoldenFormatVersion;
  m.tool_version = kVersion;
  m.command = opt.command;
  m.model.fingerprint = run.model.fingerprint;
  m.model.weights_sample = weights_sample_digest(*run.model.checkpoint);
  m.model.name = run.model.dir.filename().string();
  m.model.model_type = run.cfg.model_type;
  m.model.num_hidden_layers = run.L;
  m.model.hidden_size = run.H;
  m.model.vocab_size = run.V;
  m.model.has_mtp = run.eng->has_mtp();
  if (run.tok) m.tokenizer.fingerprint = run.tok->fingerprint();
  m.suite = {suite.name, suite.sha256, static_cast<int64_t>(suite.cases.size())};
  Manifest::Settings& s = m.settings;
  s.precision = opt.precision == Precision::fp64 ? "fp64" : "fp32";
  s.reference_config = run.rc.str();
  s.backend = run.be->name();
  s.gdn = gdn_algo_name(engine_options(run.rc).gdn);
  s.gen_tokens = opt.gen_tokens;
  for (int l = 0; l < run.L; ++l)
    if (run.stored[static_cast<size_t>(l)]) s.layers.push_back(l);
  s.positions = opt.positions;
  s.topk = run.K;
  if (opt.batch_all) s.batch = "all";  // (absent: one case at a time, as every record before it)
  // The products' ISA (util/cpu_isa.h) when the reference runs on the CPU: a record remade under
  // another ISA differs in its last bits (compare judges them within the floors).
  if (s.backend->rfind("cpu:", 0) == 0) s.cpu_isa = cpu::isa_name(cpu::active_isa());
  Manifest::NoiseFloors& nf = m.noise_floors;
  nf.status = sum.floors[0] && sum.floors[1] ? "measured" : sum.floors[0] || sum.floors[1] ? "partial" : "absent";
  if (!sum.floors[0]) nf.reason = sum.floors_reason[0];
  nf.metric = "rel_l2 of the isolated layer output (metrics.md §1, §3); kld: mean kld_topk, teacher-forced";
  const char* judges[2] = {"precision=bf16, backend=cuda and any narrow storage or attention toggle",
                           "the CPU at precision=ref or fp64 without storage or attention toggles"};
  for (int fc = 0; fc < 2; ++fc) {
    Manifest::FloorClassInfo& ci = nf.classes[fc];
    ci.config = run.floor_rc[fc].str();
    ci.measured = sum.floors[fc];
    if (!sum.floors[fc]) ci.reason = sum.floors_reason[fc];
    ci.judges = judges[fc];
  }
  return m;
}

// What a reference made on the GPU was checked for (settings.verification): the worst of the
// cases' spot checks, or why it was not checked.
Manifest::Verification verification_of(const GoldenRun& run, const std::vector<Manifest::Case>& cases) {
  const GoldenOptions& opt = run.opt;
  Manifest::Verification v;
  if (!run.verify) {
    v.status = "not checked";
    v.reason = cat("--verify-layers ", opt.verify_layers, " --verify-positions ", opt.verify_positions);
    return v;
  }
  v.status = "passed";
  v.by = run.verify_be->name();
  v.what = "isolated output of each checked layer from the record's own input, and the logits, at the first positions "
           "of every case, recomputed by the CPU reference";
  for (int l = 0; l < run.L; ++l)
    if (run.verify_layers[static_cast<size_t>(l)]) v.layers.push_back(l);
  v.positions = opt.verify_positions;
  for (const Manifest::Case& c : cases)
    if (c.verification) {
      ++v.cases;
      v.worst_rel_l2 = std::max(v.worst_rel_l2, c.verification->worst_rel_l2);
      v.worst_kld = std::max(v.worst_kld, c.verification->worst_kld);
      v.worst_generation_kld = std::max(v.worst_generation_kld, c.verification->worst_generation_kld);
    }
  v.limit_rel_l2 = kFallbackRelL2;
  v.limit_kld = kFallbackKld;
  v.generation = cat("the logits each continuation was generated from against the record's teacher-forced ones (top-",
                     kSpotCheckTopK, " KLD, same limit), and greedy continuations against their top-1");
  return v;
}

// The manifest's parts known at the end: the tensor digests, the spot checks' summaries, and the
// CLI's line on the verification.
void finish_manifest(const GoldenRun& run, Manifest& m, GoldenSummary& sum) {
  const GoldenOptions& opt = run.opt;
  m.model.tensor_digests = tensor_digests(*run.model.checkpoint);
  if (run.rc.backend != BackendKind::cpu) {
    const Manifest::Verification v = verification_of(run, m.cases);
    if (v.passed())
      sum.verification = cat("CPU spot check passed: ", v.cases, " cases, ", v.layers.size(), " layers at the first ",
                             v.positions, " positions; worst rel_l2 ", v.worst_rel_l2, " (limit ", kFallbackRelL2,
                             "), worst KLD ", v.worst_kld, " nats (limit ", kFallbackKld, "), generation steps' worst KLD ",
                             v.worst_generation_kld, " nats");
    else
      sum.verification = cat("NOT CHECKED by the CPU (", *v.reason, ")");
    m.settings.verification = v;
  }
  if (run.verify_floors && sum.floors[0]) {
    Manifest::FloorSpotCheck sc{"passed", run.floor_check_be->name(),
                                "each checked layer from the record's own input on the GPU's bf16 path against the CPU's "
                                "emulation of GPU storage, within k x the emulation's own error"};
    for (const Manifest::Case& c : m.cases)
      if (c.floor_check) {
        ++sc.cases;
        if (std::isfinite(c.floor_check->worst_ratio)) sc.worst_ratio = std::max(sc.worst_ratio, c.floor_check->worst_ratio);
      }
    sc.positions = opt.verify_positions;
    sc.k = kFloorCheckK;
    m.noise_floors.classes[0].spot_check = sc;
  }
}

// ---- the run ----

// A reference or bf16 floor engine with faults is run only to show that the spot check refuses it:
// one that passed every case writes no record.
void refuse_faulty_reference(const GoldenRun& run) {
  if (!run.floor_rc[0].faults.empty() && run.floor_eng[0])
    throw Error(ExitCode::bad, cat("golden: the CPU spot check passed the bf16 floors made on ", run.floor_rc[0].str(),
                                   ", which has faults; no record written"));
  if (!run.rc.faults.empty())
    throw Error(ExitCode::bad, cat("golden: the CPU spot check passed every case of the reference ", run.rc.str(),
                                   ", which has faults: they act outside the checked layers and positions (--verify-layers ",
                                   run.opt.verify_layers, ", --verify-positions ", run.opt.verify_positions,
                                   ") or below the fp32 limits; no record written"));
}

// Progress (stderr): the share of the work done, by each case's passes over the weights (golden_passes,
// the model `golden --plan` counts), and the time left from the cases computed so far.
struct RunProgress {
  std::FILE* progress;
  std::vector<double> work;
  double total = 0, done = 0, timed = 0, seconds_timed = 0;
  int resumed = 0;

  RunProgress(std::FILE* p, const GoldenPasses& passes) : progress(p) {
    for (const GoldenPasses::Case& c : passes.cases) work.push_back(double(c.total()));
    total = double(passes.of_cases());
  }
  void case_done(size_t ci, bool kept, double seconds) {
    if (kept) {
      ++resumed;
    } else {
      timed += work[ci];
      seconds_timed += seconds;
    }
    done += work[ci];
    if (!progress) return;
    const double left = total - done;
    std::string eta = timed > 0 && left > 0 ? cat(", about ", format_duration(seconds_timed / timed * left), " left") : "";
    std::fprintf(stderr, "golden: %zu of %zu cases done%s (%.0f %% of the work)%s\n", ci + 1, work.size(),
                 resumed ? cat(", ", resumed, " kept from an interrupted run").c_str() : "", 100.0 * done / total, eta.c_str());
  }
};

// --batch all: the continuations of case ci's batch group, generated together when the first of its
// cases that is not kept comes up, and kept in the store so an interruption does not redo them.
const GenerateResult* batch_generation(GoldenRun& run, const Suite& suite, const std::vector<std::pair<size_t, size_t>>& groups,
                                       RecordStore& store, std::map<size_t, GenerateResult>& pregen, size_t ci,
                                       std::FILE* progress) {
  if (!run.opt.batch_all) return nullptr;
  if (!pregen.count(ci)) {
    const auto [b, e] = *std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return ci >= g.first && ci < g.second; });
    std::vector<GenerateResult> gen;
    if (const std::vector<GenerateResult>* kept = store.kept_generation(b)) {
      gen = *kept;
    } else {
      if (progress) std::fprintf(stderr, "golden: generating the continuations of cases %zu-%zu together\n", b + 1, e);
      gen = generate_batch(run, suite, b, e, progress != nullptr);
      store.save_generation(b, suite.cases[b].id, gen);
    }
    for (size_t i = b; i < e; ++i) pregen[i] = gen.at(i - b);
  }
  return &pregen.at(ci);
}

// Every case of the suite, kept from an interrupted run or computed (and kept in the store), into
// the manifest's cases and files and the summary's lines.
void record_cases(GoldenRun& run, const Suite& suite, const std::vector<std::pair<size_t, size_t>>& groups,
                  RecordStore& store, Manifest& m, GoldenSummary& sum, std::FILE* progress) {
  using clock = std::chrono::steady_clock;
  RunProgress prog(progress, golden_passes(run.cfg, run.tok, suite, run.opt));
  std::map<size_t, GenerateResult> pregen;
  for (size_t ci = 0; ci < suite.cases.size(); ++ci) {
    const auto c0 = clock::now();
    const json* kept = store.kept_case(ci);
    json e;
    if (kept) {
      e = *kept;
    } else {
      const CaseResult r = record_case(run, suite.cases[ci], ci, store.partial(), progress,
                                       batch_generation(run, suite, groups, store, pregen, ci, progress));
      e = store.save_case(ci, suite.cases[ci].id, json(r.entry), r.file, r.bytes, r.sha256, r.line);
    }
    m.cases.push_back(e.at("entry").get<Manifest::Case>());
    m.files[e.at("file").get<std::string>()] = {e.at("bytes").get<uint64_t>(), e.at("sha256").get<std::string>()};
    sum.bytes += e.at("bytes").get<int64_t>();
    sum.lines.push_back(e.at("line").get<std::string>());
    prog.case_done(ci, kept != nullptr, std::chrono::duration<double>(clock::now() - c0).count());
  }
  if (progress && prog.resumed)
    std::fprintf(progress, "golden: resumed: %d of %zu cases kept from an interrupted run (checked by SHA-256)\n",
                 prog.resumed, suite.cases.size());
}

// The layer lists of the options: a bad --layers is refused before an existing `out`.
void check_layer_options(const GoldenOptions& opt, const ModelConfig& cfg) {
  (void)parse_layer_list(opt.layers, cfg);
  if (opt.verify_layers == "none") return;
  try {
    (void)parse_layer_list(opt.verify_layers, cfg);
  } catch (const InputError& e) {  // its message names --layers
    const std::string m = e.what();
    input_error("golden: --verify-", m.rfind("--", 0) == 0 ? m.substr(2) : m);
  }
}

ResumeAsked resume_asked(const GoldenRun& run) {
  const GoldenOptions& opt = run.opt;
  ResumeAsked a{opt.layers, opt.topk, opt.floors, opt.floor_classes, std::nullopt};
  if (run.verify || run.verify_floors) a.verify = std::pair{opt.verify_layers, opt.verify_positions};
  return a;
}

}  // namespace

void check_golden_options(const GoldenOptions& opt, const ModelConfig& cfg) {
  check_option_values(opt);
  check_layer_options(opt, cfg);
}

// The record is built in the store's `partial` folder, which outlives an interrupted run: every
// finished case leaves its data file there and its manifest entry beside it, and a later run with
// the same key (the model, the suite and every setting that shapes the record) keeps them, each
// checked against its SHA-256, and computes only the rest. Every case is computed alone, so the
// record is the same bytes however often the run was interrupted.
GoldenSummary write_golden(const Model& model, const Tokenizer* tok, const Suite& suite, const fs::path& out_arg,
                           const GoldenOptions& opt, const BackendFactory& factory, std::FILE* progress) {
  const fs::path out = out_arg.has_filename() ? out_arg : out_arg.parent_path();  // "golden/x/" is "golden/x"
  const auto t0 = std::chrono::steady_clock::now();
  check_golden_options(opt, model.config);
  RecordStore store(out, opt.force, progress);
  GoldenSummary sum;
  GoldenRun run(model, tok, opt, factory, sum);
  Manifest m = manifest_head(run, suite, sum);
  const std::vector<std::pair<size_t, size_t>> groups = golden_batch_groups(suite, opt);
  store.open_resume(resume_key(m, resume_asked(run)), suite, groups, run.V, opt.restart);
  record_cases(run, suite, groups, store, m, sum, progress);
  refuse_faulty_reference(run);
  finish_manifest(run, m, sum);
  sum.bytes += static_cast<int64_t>(store.commit(m.sealed_json().dump(1) + "\n"));
  sum.dir = out;
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return sum;
}

}  // namespace degen
