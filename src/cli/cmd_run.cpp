// `degenbisect run`: generate with the CPU reference engine from a prompt (plain, or rendered with the
// model's chat template) or from token ids, and print the text (thinking part separated from the
// answer), the token count and tokens/s. `--check-weights` scans every tensor for NaN/Inf.
// --config is a full RunConfig (DESIGN.md §5): the backend comes from make_backend, the per-layer
// toggles and faults from engine_options, MTP drafting from mtp_options, batch=1|all decides
// whether the prompts are generated one at a time or as one batch (batch=N: groups of N, decoded in
// padded steps of N rows); prefill_chunk and prefix_cache shape the prefill (engine/serving.h).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "cli/command.h"
#include "backends/make_backend.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/spec_decode.h"
#include "model/chat_template.h"
#include "model/model.h"
#include "model/tokenizer.h"
#include "util/error.h"

namespace degen::cli {
namespace {

namespace fs = std::filesystem;

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || item.empty() || v < 0 || v > INT32_MAX)
      input_error("--tokens: expected comma-separated non-negative ids, found '", item, "'");
    ids.push_back(static_cast<int32_t>(v));
  }
  if (ids.empty()) input_error("--tokens: no ids given");
  return ids;
}

// Scans every tensor (model/weights.h find_nonfinite); throws InputError naming each tensor with
// NaN/Inf. Returns the count scanned.
size_t check_weights(const Checkpoint& ckpt) { return require_finite_weights(ckpt, ckpt.dir().string()); }

struct RunArgs {
  std::string model;
  std::vector<std::string> prompts;
  std::string tokens;
  std::string config;
  std::string system;
  bool chat = false;
  bool no_think = false;
  bool check = false;
  int max_new_tokens = 64;
};

// Each case's prompt: not empty, every id in the vocabulary, within the model's context.
void check_prompts(const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::string>& names,
                   const ModelConfig& cfg) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) input_error("case '", names[i], "': the prompt encodes to no tokens");
    for (int32_t id : prompts[i])
      if (id >= cfg.vocab_size) input_error("case '", names[i], "': token id ", id, " >= vocab_size ", cfg.vocab_size);
    if (cfg.max_position_embeddings > 0 && static_cast<int64_t>(prompts[i].size()) > cfg.max_position_embeddings)
      input_error("case '", names[i], "': the prompt has ", prompts[i].size(), " tokens, more than the model's maximum "
                  "context max_position_embeddings = ", cfg.max_position_embeddings);
  }
}

// One case's output: its text (thinking part separated, with a tokenizer), its ids and speeds.
void print_case(const std::string& name, size_t prompt_tokens, const GenerateResult& r, const Tokenizer* tok,
                bool opened_think) {
  std::printf("== case '%s' (%zu prompt tokens) ==\n", name.c_str(), prompt_tokens);
  if (tok) {
    std::vector<int32_t> shown = r.tokens;
    if (r.reason == StopReason::stop_token && !shown.empty()) shown.pop_back();
    ThinkingSplit s = split_thinking(tok->decode(shown), opened_think);
    if (!s.thinking.empty() || s.closed || opened_think)
      std::printf("[thinking]\n%s\n[answer]\n", s.thinking.c_str());
    std::printf("%s\n", s.answer.c_str());
  }
  std::string ids;
  for (size_t j = 0; j < r.tokens.size(); ++j) ids += (j ? "," : "") + std::to_string(r.tokens[j]);
  std::printf("[ids] %s\n", ids.c_str());
  const double dec_tok = r.tokens.size() > 1 ? double(r.tokens.size() - 1) : 0.0;
  std::printf("-- %zu tokens (%s); prefill %zu tok in %.3f s (%.1f tok/s); decode %.1f tok/s\n", r.tokens.size(),
              stop_reason_name(r.reason), prompt_tokens, r.prefill_seconds,
              r.prefill_seconds > 0 ? prompt_tokens / r.prefill_seconds : 0.0,
              r.decode_seconds > 0 ? dec_tok / r.decode_seconds : 0.0);
}

// The cases of a run: each --prompt (in the chat template with --chat), or the one --tokens list.
struct RunCases {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> names;
  bool opened_think = false;  // the chat template opened a thinking part the output continues
};

RunCases run_cases(const RunArgs& a, const ModelConfig& cfg, const Tokenizer* tok) {
  RunCases c;
  if (!a.tokens.empty()) {
    c.prompts.push_back(parse_ids(a.tokens));
    c.names.push_back("tokens");
    return c;
  }
  const ChatFamily fam = chat_family_for_model_type(cfg.model_type);
  c.opened_think = a.chat && fam == ChatFamily::qwen35 && !a.no_think;
  for (size_t i = 0; i < a.prompts.size(); ++i) {
    std::string text = a.chat ? render_single_turn(fam, a.system, a.prompts[i], !a.no_think) : a.prompts[i];
    c.prompts.push_back(tok->encode(text));
    c.names.push_back(cat("prompt ", i));
  }
  return c;
}

// A trace that watches the logits for NaN/Inf: it finds the tensor responsible (check_weights throws
// naming it) or warns once that every weight is finite.
Trace nonfinite_watch(const Model& model, const std::vector<uint8_t>& mask, bool& warned) {
  Trace watch;
  watch.logits_only = true;  // graphs=on runs the decode steps as graphs
  const int64_t V = model.config.vocab_size;
  watch.observer = [&model, &mask, &warned, V](const TraceEvent& ev, Tensor& t, Backend& b) {
    if (ev.step != Step::logits || warned) return;
    std::vector<float> v = b.to_host_f32(t);
    for (size_t j = 0; j < v.size(); ++j) {
      if (std::isnan(v[j]) || (std::isinf(v[j]) && v[j] > 0) || (std::isinf(v[j]) && (mask.empty() || !mask[j % V]))) {
        check_weights(*model.checkpoint);
        std::fprintf(stderr, "run: warning: non-finite logits (%g at id %zu) although every weight is finite\n",
                     double(v[j]), j % V);
        warned = true;
        return;
      }
    }
  };
  return watch;
}

// The prompts generated as the configuration batches them: all in one batch, groups of N decoded in
// steps of N rows, or one at a time (each keeping its case index for the coupled sampler).
std::vector<GenerateResult> generate_cases(Engine& eng, const std::vector<std::vector<int32_t>>& prompts,
                                           GenerateOptions go, const RunConfig& rc, Trace& watch) {
  std::vector<GenerateResult> res;
  if (rc.batch == BatchMode::all) return generate(eng, prompts, go, &watch);
  if (rc.batch == BatchMode::padded) {
    for (size_t i = 0; i < prompts.size(); i += static_cast<size_t>(rc.batch_rows)) {
      const size_t j = std::min(prompts.size(), i + static_cast<size_t>(rc.batch_rows));
      go.first_case = static_cast<uint32_t>(i);
      for (GenerateResult& r : generate(eng, {prompts.begin() + i, prompts.begin() + j}, go, &watch)) res.push_back(std::move(r));
    }
    return res;
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    go.first_case = static_cast<uint32_t>(i);
    res.push_back(generate(eng, {prompts[i]}, go, &watch).at(0));
  }
  return res;
}

int run_run(const RunArgs& a) {
  if (a.model.empty()) input_error("run: --model DIR is required");
  const bool have_prompt = !a.prompts.empty(), have_tokens = !a.tokens.empty();
  if (have_prompt && have_tokens) input_error("run: give --prompt or --tokens, not both");
  if (!have_prompt && !have_tokens && !a.check) input_error("run: give --prompt TEXT or --tokens IDS (or --check-weights)");
  if (a.max_new_tokens < 0) input_error("run: --max-new-tokens must be >= 0, found ", a.max_new_tokens);
  const RunConfig rc = degen::parse_run_config(a.config);
  validate(rc.sampling);
  const fs::path dir = a.model;
  auto model = load_model(dir);
  const ModelConfig& cfg = model->config;

  if (a.check) {
    auto t0 = std::chrono::steady_clock::now();
    size_t n = check_weights(*model->checkpoint);
    std::printf("check-weights: all %zu tensors finite (%.1f s)\n", n,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!have_prompt && !have_tokens) return 0;
  }

  // Tokenizer (optional with --tokens), stop ids, padding mask.
  std::unique_ptr<Tokenizer> tok;
  if (fs::exists(dir / "tokenizer.json")) tok = Tokenizer::load(dir / "tokenizer.json");
  else if (have_prompt) input_error(dir.string(), ": no tokenizer.json, so --prompt cannot be encoded (use --tokens)");
  std::vector<uint8_t> mask;
  std::vector<int32_t> stops;
  if (tok) {
    mask = tok->padding_mask(cfg.vocab_size);
    stops = stop_token_ids(dir / "generation_config.json", *tok);
  } else {
    for (int64_t e : cfg.eos_token_ids) stops.push_back(static_cast<int32_t>(e));
  }

  // Cases: each --prompt, or the one --tokens list.
  const RunCases cases = run_cases(a, cfg, tok.get());
  const std::vector<std::vector<int32_t>>& prompts = cases.prompts;
  const std::vector<std::string>& names = cases.names;
  const bool opened_think = cases.opened_think;
  check_prompts(prompts, names, cfg);

  std::unique_ptr<Backend> be = make_backend(rc, cfg);
  Engine eng(cfg, model->weights, *be, engine_options(rc));
  GenerateOptions go;
  go.max_new_tokens = a.max_new_tokens;
  go.stop_ids = stops;
  go.sampling = rc.sampling;
  go.mtp = mtp_options(rc, cfg);
  check_mtp_supported(eng, go.mtp);
  go.vocab_mask = mask.empty() ? nullptr : &mask;
  go.serving = serving_options(rc, cfg);
  std::optional<PrefixCache> cache;
  if (go.serving.prefix_block > 0) cache.emplace(go.serving.prefix_block);
  go.prefix_cache = cache ? &*cache : nullptr;
  bool warned = false;
  Trace watch = nonfinite_watch(*model, mask, warned);
  auto t0 = std::chrono::steady_clock::now();
  const std::vector<GenerateResult> res = generate_cases(eng, prompts, go, rc, watch);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  for (size_t i = 0; i < res.size(); ++i) print_case(names[i], prompts[i].size(), res[i], tok.get(), opened_think);
  size_t generated = 0;
  for (const auto& r : res) generated += r.tokens.size();
  std::printf("total: %zu generated tokens in %.3f s (%.1f tok/s), backend %s, config %s\n", generated, total,
              total > 0 ? generated / total : 0.0, be->name().c_str(), rc.str().c_str());
  if (!be->graph_summary().empty()) std::printf("%s\n", be->graph_summary().c_str());
  return 0;
}

CommandRegistrar reg("run", "Generate (the CPU reference by default, any --config) and print text, token count and tok/s", 20,
                     [](CLI::App* sub) -> std::function<int()> {
  auto a = std::make_shared<RunArgs>();
  sub->add_option("--model", a->model, "Model folder (config.json, *.safetensors, tokenizer.json)");
  sub->add_option("--prompt", a->prompts, "Prompt text (repeat for a batch)");
  sub->add_flag("--chat", a->chat, "Render the prompt with the model's chat template (one user turn)");
  sub->add_option("--system", a->system, "With --chat: a system message");
  sub->add_flag("--no-think", a->no_think, "With --chat: disable thinking (empty think block)");
  sub->add_option("--tokens", a->tokens, "Prompt as comma-separated token ids instead of text");
  sub->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate at most (default 64)");
  sub->add_option("--config", a->config,
                  "Toggles key=value,... (DESIGN.md §5): precision=ref|fp64|bf16, attn, gdn, ssm_dtype, conv_dtype, "
                  "kv_dtype, mtp, tp, batch, fault=NAME[@layers], temp, top_p, top_k, min_p, rep_pen, presence_pen, seed "
                  "(default: the greedy fp32 reference)");
  sub->add_flag("--check-weights", a->check, "Scan every tensor for NaN/Inf first (alone: scan and exit)");
  sub->footer("Examples:\n  degenbisect run --model models/tiny-qwen35 --prompt 'Hello' --chat\n"
              "  degenbisect run --model DIR --tokens 1,2,3 --max-new-tokens 8 --config precision=fp64\n"
              "  degenbisect run --model DIR --prompt 'Hi' --config precision=bf16,attn=flash,ssm_dtype=bf16@4\n"
              "  degenbisect run --model DIR --check-weights");
  return [a] { return run_run(*a); };
});

}  // namespace
}  // namespace degen::cli
