// `degenbisect inspect MODEL`: what a checkpoint is, whether it is valid, and what it needs to run.
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "model/model.h"
#include "model/shard.h"
#include "util/cpu_isa.h"
#include "util/error.h"
#include "util/json_output.h"

namespace degen::cli {
namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string human_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3) std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

struct InspectArgs {
  std::string model;
  bool json = false;
  bool headers_only = false;  // --headers-only: skip the scan of the weight values (NaN/Inf)
  int tp = 1;
};

// What inspect finds, for the JSON and the text.
struct InspectFacts {
  nlohmann::json out;
  bool has_weights = false;
  int mtp_layers = 0;
  int64_t weight_bytes = 0;
  int exit_code = 0;
  MemoryEstimate mem, rank_mem;
  TpMemory tpm;
};

// The architecture, as config.json declares it.
nlohmann::json describe_config(const std::string& model, const ModelConfig& cfg) {
  nlohmann::json out;
  out["model"] = model;
  out["model_type"] = cfg.model_type;
  out["arch"] = arch_name(cfg.arch);
  out["tensor_prefix"] = cfg.tensor_prefix;
  out["layers"] = cfg.num_layers;
  out["layer_map"] = cfg.layer_map();
  out["linear_layers"] = cfg.num_linear_layers();
  out["full_layers"] = cfg.num_full_layers();
  out["hidden_size"] = cfg.hidden_size;
  out["vocab_size"] = cfg.vocab_size;
  out["attention"] = {{"n_q", cfg.n_q}, {"n_kv", cfg.n_kv}, {"head_dim", cfg.head_dim},
                      {"rotary_dim", cfg.rotary_dim}, {"rope_theta", cfg.rope_theta}};
  out["gdn"] = {{"n_k", cfg.n_k}, {"n_v", cfg.n_v}, {"d_k", cfg.d_k}, {"d_v", cfg.d_v}, {"r", cfg.r()},
                {"conv_kernel", cfg.conv_kernel}};
  if (cfg.is_moe())
    out["moe"] = {{"experts", cfg.num_experts}, {"experts_per_tok", cfg.experts_per_tok},
                  {"moe_intermediate_size", cfg.moe_intermediate_size},
                  {"shared_expert_intermediate_size", cfg.shared_expert_intermediate_size},
                  {"norm_topk_prob", cfg.norm_topk_prob}};
  else
    out["intermediate_size"] = cfg.intermediate_size;
  out["tie_word_embeddings"] = cfg.tie_word_embeddings;
  if (cfg.mamba_ssm_dtype) out["mamba_ssm_dtype"] = *cfg.mamba_ssm_dtype;
  return out;
}

// The checkpoint: parameters, dtypes, validity and fingerprint; without weights, the sizes the
// config implies (bf16, the declared MTP layers).
void describe_weights(const std::string& model, const ModelConfig& cfg, bool scan_values, InspectFacts& f) {
  using nlohmann::json;
  json& out = f.out;
  if (!f.has_weights) {
    CheckpointLayout lay;
    lay.mtp_layers = cfg.mtp_num_layers;
    int64_t total = 0;
    for (const auto& spec : weight_table(cfg, lay)) {
      if (spec.need == Need::optional) continue;
      int64_t n = 1;
      for (int64_t d : spec.shape) n *= d;
      total += n;
    }
    f.mtp_layers = lay.mtp_layers;
    f.weight_bytes = total * 2;
    out["params"] = {{"total", total}};
    out["valid"] = nullptr;
    out["weights"] = "absent (config only); sizes assume bf16 and the declared MTP layers";
    return;
  }
  auto ckpt = Checkpoint::open(model);
  CheckpointLayout lay = detect_layout(cfg, *ckpt);
  f.mtp_layers = lay.mtp_layers;
  json params = json::object();
  int64_t total = 0;
  for (const auto& pc : count_params(cfg, *ckpt)) {
    params[pc.kind] = pc.count;
    total += pc.count;
  }
  params["total"] = total;
  out["params"] = params;
  std::map<std::string, int> dtypes;
  for (const TensorView* t : ckpt->tensors()) dtypes[std::string(dtype_name(t->dtype))]++;
  out["dtypes"] = dtypes;
  out["tensors"] = ckpt->tensors().size();
  out["shards"] = ckpt->files().size();
  out["experts_fused"] = lay.experts_fused;
  f.weight_bytes = static_cast<int64_t>(ckpt->total_bytes());
  try {
    bind_weights(cfg, *ckpt);
    out["valid"] = true;
  } catch (const InputError& e) {
    out["valid"] = false;
    out["validation_error"] = e.what();
    f.exit_code = static_cast<int>(ExitCode::input);
  }
  // The values: NaN or Inf in a weight make the checkpoint invalid (exit 128), whatever engine runs it.
  out["values_scanned"] = scan_values;
  if (scan_values) {
    const std::vector<NonFiniteTensor> bad = find_nonfinite(*ckpt);
    json nf = json::array();
    for (const NonFiniteTensor& b : bad)
      nf.push_back({{"tensor", b.tensor->name}, {"count", b.count}, {"numel", b.tensor->numel()}, {"first", b.first},
                    {"first_value", cat(b.first_value)}, {"file", b.tensor->file}});
    out["nonfinite_tensors"] = nf;
    if (!bad.empty()) {
      const std::string msg = nonfinite_message(bad, ckpt->tensors().size(), "the model");
      const bool was_valid = out["valid"].get<bool>();
      out["valid"] = false;
      out["validation_error"] = was_valid ? msg : out["validation_error"].get<std::string>() + "\n" + msg;
      f.exit_code = static_cast<int>(ExitCode::input);
    }
  }
  out["fingerprint"] = model_fingerprint(cfg, *ckpt);
}

// Memory of the whole model and, at tp > 1, of one rank (model/shard.h).
void describe_memory(const ModelConfig& cfg, int tp, InspectFacts& f) {
  nlohmann::json& out = f.out;
  out["mtp_layers"] = f.mtp_layers;
  f.mem = estimate_memory(cfg, f.weight_bytes, f.mtp_layers);
  out["memory"] = {{"weight_bytes", f.mem.weight_bytes},
                   {"kv_bytes_per_token", f.mem.kv_bytes_per_token},
                   {"mtp_kv_bytes_per_token", f.mem.mtp_kv_bytes_per_token},
                   {"ssm_state_bytes_per_seq", f.mem.ssm_state_bytes_per_seq},
                   {"conv_bytes_per_seq", f.mem.conv_bytes_per_seq}};
  if (tp <= 1) return;
  f.tpm = tp_memory(cfg, tp, f.mtp_layers > 0);  // InputError naming the dimension when it does not split
  f.rank_mem = estimate_memory(rank_config(cfg, tp), f.tpm.rank_weight_bytes, f.mtp_layers);
  out["tp"] = {{"ranks", tp},
               {"rank_weight_bytes", f.tpm.rank_weight_bytes},
               {"sharded_weight_bytes", f.tpm.sharded_bytes},
               {"replicated_weight_bytes", f.tpm.replicated_bytes},
               {"rank_kv_bytes_per_token", f.rank_mem.kv_bytes_per_token},
               {"rank_mtp_kv_bytes_per_token", f.rank_mem.mtp_kv_bytes_per_token},
               {"rank_ssm_state_bytes_per_seq", f.rank_mem.ssm_state_bytes_per_seq},
               {"rank_conv_bytes_per_seq", f.rank_mem.conv_bytes_per_seq},
               {"allreduces_per_token", f.tpm.allreduces_per_forward},
               {"allreduce_bytes", f.tpm.allreduce_bytes_per_token}};
}

void print_inspect(const InspectArgs& a, const ModelConfig& cfg, const InspectFacts& f) {
  const nlohmann::json& out = f.out;
  const MemoryEstimate& mem = f.mem;
  std::printf("model        %s\n", a.model.c_str());
  std::printf("architecture %s (model_type %s, tensors under %s)\n", arch_name(cfg.arch), cfg.model_type.c_str(),
              cfg.tensor_prefix.c_str());
  std::printf("layers       %d: %s (G = Gated DeltaNet, A = gated attention), %d GDN + %d attention\n",
              cfg.num_layers, cfg.layer_map().c_str(), cfg.num_linear_layers(), cfg.num_full_layers());
  std::printf("hidden       %lld, vocabulary %lld rows%s\n", (long long)cfg.hidden_size, (long long)cfg.vocab_size,
              cfg.tie_word_embeddings ? ", lm_head tied to embeddings" : "");
  std::printf("attention    %d q / %d kv heads, head_dim %d, rotary %d dims, theta %g\n", cfg.n_q, cfg.n_kv,
              cfg.head_dim, cfg.rotary_dim, cfg.rope_theta);
  std::printf("gdn          n_k %d, n_v %d (r = %d), d_k %d, d_v %d, conv %d\n", cfg.n_k, cfg.n_v, cfg.r(), cfg.d_k,
              cfg.d_v, cfg.conv_kernel);
  if (cfg.is_moe())
    std::printf("moe          %d experts, top-%d, I_e %lld, shared I_s %lld, renormalise %s\n", cfg.num_experts,
                cfg.experts_per_tok, (long long)cfg.moe_intermediate_size,
                (long long)cfg.shared_expert_intermediate_size, cfg.norm_topk_prob ? "yes" : "no");
  else
    std::printf("mlp          dense, intermediate %lld\n", (long long)cfg.intermediate_size);
  std::printf("mtp          %s\n", f.mtp_layers ? (std::to_string(f.mtp_layers) + " layer(s)").c_str() : "absent");
  if (out["params"].contains("total")) {
    std::printf("parameters   %s", human_count(out["params"]["total"].get<double>()).c_str());
    std::string sep = " (";
    for (auto& [k, v] : out["params"].items()) {
      if (k == "total") continue;
      std::printf("%s%s %s", sep.c_str(), k.c_str(), human_count(v.get<double>()).c_str());
      sep = ", ";
    }
    std::printf("%s\n", sep == ", " ? ")" : "");
  }
  if (out.contains("dtypes")) {
    std::printf("dtypes      ");
    for (auto& [k, v] : out["dtypes"].items()) std::printf(" %s x%d", k.c_str(), v.get<int>());
    std::printf("  (%zu tensors in %zu file(s))\n", out["tensors"].get<size_t>(), out["shards"].get<size_t>());
  }
  std::printf("memory       weights %s; KV cache %s per token (+ %s for MTP); GDN state %s + conv window %s per sequence\n",
              human_bytes(double(mem.weight_bytes)).c_str(), human_bytes(double(mem.kv_bytes_per_token)).c_str(),
              human_bytes(double(mem.mtp_kv_bytes_per_token)).c_str(),
              human_bytes(double(mem.ssm_state_bytes_per_seq)).c_str(),
              human_bytes(double(mem.conv_bytes_per_seq)).c_str());
  if (a.tp > 1)
    std::printf("tp=%d         per rank: weights %s (%s sharded 1/%d + %s replicated); KV cache %s per token; "
                "GDN state %s + conv window %s per sequence; %d all-reduces of %s per decoded token\n",
                a.tp, human_bytes(double(f.tpm.rank_weight_bytes)).c_str(), human_bytes(double(f.tpm.sharded_bytes)).c_str(),
                a.tp, human_bytes(double(f.tpm.replicated_bytes)).c_str(),
                human_bytes(double(f.rank_mem.kv_bytes_per_token)).c_str(),
                human_bytes(double(f.rank_mem.ssm_state_bytes_per_seq)).c_str(),
                human_bytes(double(f.rank_mem.conv_bytes_per_seq)).c_str(), f.tpm.allreduces_per_forward,
                human_bytes(double(f.tpm.allreduce_bytes_per_token)).c_str());
  if (!f.has_weights) std::printf("weights      absent (config only)\n");
  else if (out["valid"].get<bool>())
    std::printf("validation   ok%s\n", out["values_scanned"].get<bool>() ? " (every weight finite)"
                                                                           : " (headers only; values not scanned for NaN/Inf)");
  else std::printf("validation   FAILED\n%s\n", out["validation_error"].get<std::string>().c_str());
  if (out.contains("fingerprint")) std::printf("fingerprint  %s\n", out["fingerprint"].get<std::string>().c_str());
  std::printf("cpu          the reference's products on %s\n", out["cpu_isa"]["description"].get<std::string>().c_str());
}


int run_inspect(const InspectArgs& a) {
  ModelConfig cfg = load_model_config(a.model);
  InspectFacts f;
  f.out = describe_config(a.model, cfg);
  f.has_weights = has_weight_files(a.model);
  describe_weights(a.model, cfg, !a.headers_only, f);
  describe_memory(cfg, a.tp, f);
  f.out["cpu_isa"] = {{"active", cpu::isa_name(cpu::active_isa())}, {"best", cpu::isa_name(cpu::best_isa())},
                      {"description", cpu::isa_description()}};
  if (a.json) std::printf("%s\n", json_text(f.out, 2).c_str());
  else print_inspect(a, cfg, f);
  return f.exit_code;
}

CommandRegistrar reg("inspect", "Describe a checkpoint: architecture, layer map, parameters, memory, validity", 10,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<InspectArgs>();
  sub->add_option("model", a->model, "Model folder (config.json + *.safetensors)")->required();
  sub->add_flag("--json", a->json, "Print JSON instead of text");
  sub->add_flag("--headers-only", a->headers_only,
                "Read the safetensors headers only: skip the scan of every weight value for NaN/Inf (which reads the\n"
                "whole checkpoint once)");
  sub->add_option("--tp", a->tp, "Also show what one rank holds at this many tensor-parallel ranks (weights, KV "
                                 "cache, GDN state, all-reduces per token); a model that does not split is an error")
      ->check(CLI::Range(1, 64));
  sub->footer("Validation: every tensor against the config (names, shapes, dtypes) and, unless --headers-only, every\n"
              "weight value finite (a NaN or Inf names its tensor and count: the model is broken, not an engine).\n"
              "Exit codes: 0 valid, 128 unreadable or invalid checkpoint (the problems are listed).");
  return [a] { return run_inspect(*a); };
});

}  // namespace
}  // namespace degen::cli
