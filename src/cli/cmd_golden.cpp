// `degenbisect golden`: run a prompt suite through the reference (the CPU, or the fp32 reference on the
// GPU checked by the CPU) and write a golden record
// (DESIGN.md §6, src/diag/golden.h): token ids, per-position top-K log-probs, per-layer outputs,
// MTP drafts and per-layer noise floors, with checksums, written atomically.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "record/cases.h"
#include "diag/golden.h"
#include "diag/golden_plan.h"
#include "util/cpu_isa.h"
#include "util/resource_meter.h"
#include "backends/make_backend.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "util/error.h"
#include "util/output_file.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;

struct GoldenArgs {
  std::string model, cases, out, layers = "all", positions = "auto", batch = "1";
  std::optional<std::string> precision;  // unset: ref
  std::string config, verify_layers = "all", floors_config, floor_classes = "both";
  int verify_positions = 4;
  int gen_tokens = -1;
  int topk = 20;
  bool no_floors = false, force = false, restart = false, plan = false;
  std::optional<double> storage_gbps, memory_gbps, gflops, memory_gb;
  std::string argv;
};

// Exit 125 when the plan says this machine cannot hold the run (`before`: refused before a real run starts).
void refuse_if_too_big(const GoldenPlan& p, bool before) {
  if (!p.refused()) return;
  throw UntestableError(cat("golden: this machine cannot hold the run: it needs about ", format_bytes(p.peak_anon_bytes),
                            " of memory beside the weights", before ? " (see `golden --plan`)" : "", ", ",
                            format_bytes(p.available_bytes), " are available",
                            before ? "; store fewer --positions or --layers, or split the suite" : ""));
}

// The plan (diag/golden_plan.h) of this golden run; `probe`: measure the machine's rates.
GoldenPlan make_plan(const GoldenArgs& a, const GoldenOptions& o, const Suite& suite, const Model* model,
                     const Tokenizer* tok, bool probe) {
  PlanAssumptions as;
  as.storage_gbps = a.storage_gbps;
  as.memory_gbps = a.memory_gbps;
  as.gflops = a.gflops;
  as.memory_gb = a.memory_gb;
  as.probe = probe;
  if (model) return plan_golden(a.model, model->config, model->checkpoint.get(), tok, suite, o, as, make_backend);
  const ModelConfig cfg = load_model_config(a.model);
  std::unique_ptr<Checkpoint> ckpt;
  if (has_weight_files(a.model)) ckpt = Checkpoint::open(a.model);
  return plan_golden(a.model, cfg, ckpt.get(), tok, suite, o, as, make_backend);
}

int run_golden(const GoldenArgs& a) {
  if (a.model.empty() || a.cases.empty() || (a.out.empty() && !a.plan))
    input_error("golden: --model, --cases and --out are required (--out not with --plan)");
  if (!a.plan) check_output_folder(a.out, "golden --out");
  GoldenOptions o;
  std::string note;  // the words of --config precision=; golden's older fp32 still taken, with a note
  const std::optional<Precision> prec = a.precision ? precision_from_word(*a.precision, &note) : Precision::ref;
  if (!prec || (*prec != Precision::ref && *prec != Precision::fp64))
    input_error("golden: --precision ", *a.precision, ": expected ref or fp64");
  if (!note.empty()) std::fprintf(stderr, "golden: note: %s\n", note.c_str());
  o.precision = *prec;
  if (a.gen_tokens >= 0) o.gen_tokens = a.gen_tokens;
  else if (a.gen_tokens != -1) input_error("golden: --gen-tokens must be >= 0, found ", a.gen_tokens);
  o.layers = a.layers;
  o.positions = a.positions;
  o.topk = a.topk;
  o.floors = !a.no_floors;
  o.force = a.force;
  o.restart = a.restart;
  if (a.batch != "1" && a.batch != "all") input_error("golden: --batch ", a.batch, ": expected 1 or all");
  o.batch_all = a.batch == "all";
  o.command = a.argv;
  if (!a.config.empty()) o.reference = parse_run_config(a.config);
  o.verify_layers = a.verify_layers;
  if (!a.floors_config.empty()) o.bf16_floors = parse_run_config(a.floors_config);
  o.floor_classes = a.floor_classes;
  o.verify_positions = a.verify_positions;
  if (a.plan && o.reference.backend != BackendKind::cpu)
    input_error("golden --plan estimates the CPU reference; with --config ", o.reference.str(),
                " the CPU runs only the spot check (one prefill of --verify-positions tokens per case)");
  // Rates and memory of a machine: 0.001 (1 MB/s, 1 MFLOP/s, 1 MB) is far below any that runs a
  // model, 1e9 far above any that exists; a rate of 1e-320 made the estimate infinite.
  for (const auto& [name, v] : {std::pair{"--storage-gbps", a.storage_gbps}, {"--memory-gbps", a.memory_gbps},
                                {"--gflops", a.gflops}, {"--memory-gb", a.memory_gb}})
    if (v && !(*v >= 1e-3 && *v < 1e9))
      input_error("golden: ", name, " must be a positive number of at least 0.001 and below 1e9, found ",
                  std::isfinite(*v) ? nlohmann::json(*v).dump() : cat(*v));  // (shortest text: 1e-320, not 9.99989e-321)
  const Suite suite = load_suite(a.cases);
  std::unique_ptr<Tokenizer> tok;
  if (fs::exists(fs::path(a.model) / "tokenizer.json")) tok = Tokenizer::load(fs::path(a.model) / "tokenizer.json");
  if (a.plan) {  // needs no weights: a config-only folder is planned from its config (bf16)
    const GoldenPlan p = make_plan(a, o, suite, nullptr, tok.get(), true);
    std::printf("golden plan: %s on %s (the CPU's products on %s)\n", a.model.c_str(), a.cases.c_str(),
                cpu::isa_description().c_str());
    for (const std::string& l : p.lines()) std::printf("  %s\n", l.c_str());
    refuse_if_too_big(p, false);
    return 0;
  }
  ResourceMeter meter;
  auto model = load_model(a.model);
  std::FILE* progress = global_options().quiet ? nullptr : stdout;
  {  // refuse before any work what would end in an out-of-memory kill (the CPU's runs: the reference, or
     // with a GPU reference its spot check and the floors the CPU makes)
    const GoldenPlan p = make_plan(a, o, suite, model.get(), tok.get(), false);
    refuse_if_too_big(p, true);
    if (progress && o.reference.backend == BackendKind::cpu)
      std::fprintf(stderr, "golden: %lld passes over %s of weights; peak anonymous memory at most %s of %s available; "
                   "products on %s\n",
                   static_cast<long long>(p.passes()), format_bytes(p.weight_bytes).c_str(),
                   format_bytes(p.peak_anon_bytes).c_str(), format_bytes(p.available_bytes).c_str(),
                   cpu::isa_description().c_str());
  }
  GoldenSummary s = write_golden(*model, tok.get(), suite, a.out, o, make_backend, progress);
  std::printf("golden: wrote %s: suite '%s', %zu cases, %.1f KiB in %.2f s\n", s.dir.string().c_str(), suite.name.c_str(),
              suite.cases.size(), double(s.bytes) / 1024.0, s.seconds);
  if (!s.verification.empty()) std::printf("golden: %s\n", s.verification.c_str());
  for (FloorClass fc : {FloorClass::bf16, FloorClass::fp32}) {
    const int i = static_cast<int>(fc);
    if (s.floors[i])
      std::printf("golden: %s noise floors measured\n", floor_class_name(fc));
    else
      std::printf("golden: %s noise floors ABSENT: %s\n        compare will judge %s-class paths against fixed relative "
                  "limits instead (see `degenbisect compare --help`)\n",
                  floor_class_name(fc), s.floors_reason[i].c_str(), floor_class_name(fc));
  }
  if (progress) std::fprintf(stderr, "golden: cost: %s\n", meter.now().str().c_str());
  return 0;
}

CommandRegistrar reg("golden", "Record what the reference does on a prompt suite (a golden record)", 30,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<GoldenArgs>();
  sub->add_option("--model", a->model, "Model folder (config.json, *.safetensors, tokenizer.json)");
  sub->add_option("--cases", a->cases, "Prompt suite (cases/*.json)");
  sub->add_option("--out", a->out, "Record folder to write (e.g. golden/tiny-qwen35/smoke)");
  sub->add_option("--gen-tokens", a->gen_tokens, "Generation budget for every case (default: each case's max_new_tokens)");
  sub->add_option("--precision", a->precision, "Reference precision, as --config precision=: ref (default) or fp64");
  sub->add_option("--layers", a->layers, "Layer outputs to store: all (default), none, or a list such as 0,3,5-7");
  sub->add_option("--positions", a->positions,
                  "Positions whose layer outputs are stored: auto (all while a case stays under 64 MiB, else the "
                  "longest prefix that fits; default), all, none, or N (the first N)");
  sub->add_option("--topk", a->topk, "Log-probabilities kept per position (default 20)");
  sub->add_flag("--no-floors", a->no_floors, "Do not measure the noise floors (bf16 and fp32 classes)");
  sub->add_flag("--plan", a->plan,
                "Print what the run will cost (passes over the weights, peak memory by a stated formula, time from\n"
                "a short probe of this machine) and exit; 125 when this machine cannot hold it. No weights needed");
  sub->add_option("--storage-gbps", a->storage_gbps, "Plan with this storage read rate (GB/s) instead of the probe's");
  sub->add_option("--memory-gbps", a->memory_gbps, "Plan with this rate of weights through the matmuls from RAM (GB/s)");
  sub->add_option("--gflops", a->gflops, "Plan with this prefill matmul rate (GFLOP/s)");
  sub->add_option("--memory-gb", a->memory_gb, "Plan (and refuse) as if this much memory were available (GB)");
  sub->add_option("--batch", a->batch,
                  "1 (default): each case generated alone; all: consecutive cases with equal generation settings\n"
                  "generated together, one pass over the weights per step for all of them (large models; recorded\n"
                  "in the manifest: the batch changes the last bits of the sums, as compare's batch=all)");
  sub->add_option("--config", a->config,
                  "The engine that makes the record: the CPU (default), or backend=cuda,precision=ref for the fp32\n"
                  "reference on the GPU (tp=N, gemm and graphs allowed), checked by the CPU (--verify-*)");
  sub->add_option("--floors-config", a->floors_config,
                  "The engine of the bf16 noise floors: precision=bf16 (the CPU's emulation of GPU storage; default)\n"
                  "or backend=cuda (the bf16 GPU path, spot-checked by the CPU's emulation at --verify-*)");
  sub->add_option("--floor-classes", a->floor_classes,
                  "Noise-floor classes to measure: both (default), bf16 or fp32 (fp32: a CPU fp64 run)");
  sub->add_option("--verify-layers", a->verify_layers,
                  "With a GPU reference: the layers the CPU spot check recomputes from the record's own inputs\n"
                  "(all (default), none, or a list such as 0,3,5-7); each must agree within the fp32 limits, else\n"
                  "no record is written (exit 1); the result is in the manifest (settings.verification)");
  sub->add_option("--verify-positions", a->verify_positions,
                  "With a GPU reference: the first N positions of every case the spot check recomputes (default 4)");
  sub->add_flag("--restart", a->restart, "Discard the finished cases of an interrupted run instead of keeping them");
  sub->add_flag("--force", a->force,
                "Replace an existing golden record at --out (atomically: --out holds the old or the new record at\n"
                "every moment, even if killed; the leftovers of killed runs are removed by the next run)");
  sub->footer(
      "One golden run per --out at a time: a second is refused, naming the first one's PID (.NAME.lock beside it).\n"
      "An interrupted run (killed, out of time) keeps its finished cases in .NAME.partial and .NAME.resume beside\n"
      "--out; the same command again keeps them (each checked by SHA-256) and computes the rest: the record is\n"
      "byte-identical to an uninterrupted run's. That state is checked whole first: an entry edited, damaged or\n"
      "made for other settings, a data file not matching its entry, or a file the run does not write there is\n"
      "refused (exit 128, naming what to remove; --restart discards it all). Progress and the time left go to stderr, and at the end what\n"
      "the run cost (wall and CPU time, bytes read from storage, peak anonymous memory).\n"
      "Memory: the weights stay memory-mapped (the page cache, not counted); the run's own memory is at most\n"
      "  B x state (GDN, conv, KV of T tokens) + activations of R rows + 2 T V (8 + e) logits + 3 (S+1) P H 4 layers\n"
      "  + 2 x a case's data file + threads x 512 KiB tiles + R x max(H, I) x 4 (a product's packed input)\n"
      "  + 160 MiB (T tokens, P positions, S stored layers,\n"
      "  B sequences generated together, R = max(T, their prompt tokens), e = 4 at fp32, 8 at fp64); a run that\n"
      "  would not fit is refused (exit 125) before it starts.\n"
      "Examples:\n"
      "  degenbisect golden --model models/tiny-qwen35 --cases cases/smoke.json --out golden/tiny-qwen35/smoke\n"
      "  degenbisect golden --model DIR --cases cases/long-decode.json --out /tmp/g --layers 0,31,63 --positions 256\n"
      "  degenbisect golden --plan --model DIR --cases cases/smoke.json --memory-gbps 100 --memory-gb 512\n"
      "  degenbisect golden --model DIR --cases cases/smoke.json --out /tmp/g --config backend=cuda,precision=ref,tp=2");
  return [a, sub] {
    a->argv = "degenbisect golden --model " + a->model + " --cases " + a->cases + " --out " + a->out;
    if (a->gen_tokens >= 0) a->argv += " --gen-tokens " + std::to_string(a->gen_tokens);
    if (a->precision && *a->precision != "fp32") a->argv += " --precision " + *a->precision;
    if (a->layers != "all") a->argv += " --layers " + a->layers;
    if (a->positions != "auto") a->argv += " --positions " + a->positions;
    if (a->topk != 20) a->argv += " --topk " + std::to_string(a->topk);
    if (a->batch != "1") a->argv += " --batch " + a->batch;
    if (a->no_floors) a->argv += " --no-floors";
    if (!a->config.empty()) a->argv += " --config " + a->config;
    if (!a->floors_config.empty()) a->argv += " --floors-config " + a->floors_config;
    if (a->floor_classes != "both") a->argv += " --floor-classes " + a->floor_classes;
    if (a->verify_layers != "all") a->argv += " --verify-layers " + a->verify_layers;
    if (a->verify_positions != 4) a->argv += " --verify-positions " + std::to_string(a->verify_positions);
    return run_golden(*a);
  };
});

}  // namespace
}  // namespace degen::cli
