// llama-dump: runs the token sequences of a degenbisect golden record through llama.cpp, teacher
// forced (one batch per sequence, logits at every position), and writes every named intermediate
// the engine computes (seen through its cb_eval callback: l_out-N, attn_norm-N, linear_attn_out-N,
// ...) to one safetensors file per case, in the dump format of docs/dump-format.md, for
// `degenbisect compare --dump DIR`.
//
//   llama-dump -m MODEL.gguf --golden DIR --out DIR [--case ID] [--names REGEX] [--threads N]
//              [--cache-type f16|f32|bf16|q8_0] [--flash-attn auto|on|off] [--decode]
//
// --decode: decode mode, the way a server runs a generation: the prompt in one batch, then each
// token of the golden continuation as its own batch (teacher forced: the golden's tokens, not the
// engine's), so that every position after the prompt is computed from the recurrent state and the
// caches carried across llama_decode calls. Each name's rows of the calls are concatenated in position
// order; a name whose per-token size differs between calls (attention scores over a growing cache, a
// state) is left out and listed in the metadata's `decode_skipped`. The metadata says `mode: decode`
// and `prompt_tokens`.
//
// A name the graph computes more than once (Kcur-N before and after RoPE) keeps its LAST value:
// what the name holds when the graph is done with it. The KV cache type and flash attention are
// llama.cpp's defaults (f16, auto) unless given: an f32 GGUF is only an fp32 path with f32 caches.
//
// Built by scripts/build-llama-cpp.sh inside llama.cpp's own tree (it links libllama and ggml and
// uses the nlohmann/json that llama.cpp vendors); degenbisect itself does not link llama.cpp.
// Exit codes: 0 written, 2 bad arguments, 1 anything else (model, golden or decode failure).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"

namespace {

using json = nlohmann::json;

struct Args {
  std::string model, golden, out, only_case;
  std::string names = R"(^[A-Za-z_.]+(-[0-9]+)?$)";  // the engine's own names, not "x (view)"
  // The machine's cores, at most 4: more threads than cores spin against each other in ggml's
  // barrier (decode mode's one-token calls took minutes per case at 4 threads on 2 cores).
  int threads = static_cast<int>(std::min(4u, std::max(1u, std::thread::hardware_concurrency())));
  ggml_type cache_type = GGML_TYPE_F16;
  llama_flash_attn_type flash = LLAMA_FLASH_ATTN_TYPE_AUTO;
  bool decode = false;
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "llama-dump: %s\nusage: llama-dump -m MODEL.gguf --golden DIR --out DIR "
                       "[--case ID] [--names REGEX] [--threads N] "
                       "[--cache-type f16|f32|bf16|q8_0] [--flash-attn auto|on|off] [--decode]\n", msg.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i++) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(k + " needs a value");
      return argv[++i];
    };
    if (k == "-m" || k == "--model") a.model = val();
    else if (k == "--golden") a.golden = val();
    else if (k == "--out") a.out = val();
    else if (k == "--case") a.only_case = val();
    else if (k == "--names") a.names = val();
    else if (k == "--decode") a.decode = true;
    else if (k == "--threads") a.threads = std::atoi(val().c_str());
    else if (k == "--cache-type") {
      const std::string v = val();
      const std::map<std::string, ggml_type> types = {
          {"f16", GGML_TYPE_F16}, {"f32", GGML_TYPE_F32}, {"bf16", GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0}};
      if (!types.count(v)) usage_error("--cache-type: expected f16, f32, bf16 or q8_0, got '" + v + "'");
      a.cache_type = types.at(v);
    } else if (k == "--flash-attn") {
      const std::string v = val();
      if (v == "on") a.flash = LLAMA_FLASH_ATTN_TYPE_ENABLED;
      else if (v == "off") a.flash = LLAMA_FLASH_ATTN_TYPE_DISABLED;
      else if (v == "auto") a.flash = LLAMA_FLASH_ATTN_TYPE_AUTO;
      else usage_error("--flash-attn: expected auto, on or off, got '" + v + "'");
    }
    else if (k == "-h" || k == "--help") {
      std::printf("llama-dump: writes every named intermediate of llama.cpp over a golden record's tokens\n"
                  "usage: llama-dump -m MODEL.gguf --golden DIR --out DIR [--case ID] [--names REGEX] [--threads N]\n"
                  "                  [--cache-type f16|f32|bf16|q8_0] [--flash-attn auto|on|off] [--decode]\n"
                  "--decode: the prompt in one batch, then each golden continuation token as its own batch\n"
                  "format: docs/dump-format.md; compared by `degenbisect compare --dump DIR`\n");
      std::exit(0);
    }
    else usage_error("unknown argument '" + k + "'");
  }
  if (a.model.empty() || a.golden.empty() || a.out.empty()) usage_error("-m, --golden and --out are required");
  if (a.threads < 1) usage_error("--threads: expected a positive number");
  return a;
}

// A safetensors file's header and the byte offset of its data.
struct Safetensors {
  json header;
  std::vector<char> data;
};

Safetensors read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  if (!f || n == 0 || n > (1u << 26)) throw std::runtime_error(path + ": not a safetensors file");
  std::string h(n, '\0');
  f.read(h.data(), static_cast<std::streamsize>(n));
  Safetensors s;
  s.header = json::parse(h);
  s.data.assign(std::istreambuf_iterator<char>(f), {});
  return s;
}

std::vector<int32_t> i32_tensor(const Safetensors& s, const std::string& name, const std::string& path) {
  if (!s.header.contains(name)) throw std::runtime_error(path + ": no tensor '" + name + "'");
  const json& t = s.header[name];
  if (t["dtype"] != "I32") throw std::runtime_error(path + ": '" + name + "' is not I32");
  const size_t b = t["data_offsets"][0], e = t["data_offsets"][1];
  if (e > s.data.size() || b > e) throw std::runtime_error(path + ": '" + name + "' lies outside the file");
  std::vector<int32_t> v((e - b) / 4);
  std::memcpy(v.data(), s.data.data() + b, e - b);
  return v;
}

// What the callback collects for one sequence: each name's last value, as float32 rows.
struct Capture {
  std::regex names;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;
  std::map<std::string, int> repeats;
  int skipped_noncontiguous = 0;
};

bool on_tensor(ggml_tensor* t, bool ask, void* user) {
  auto* cap = static_cast<Capture*>(user);
  const std::string name = ggml_get_name(t);
  const bool wanted = std::regex_match(name, cap->names);
  if (ask) return wanted;
  if (!wanted) return true;
  if (cap->tensors.count(name)) cap->repeats[name]++;
  if (!ggml_is_contiguous(t)) {
    cap->skipped_noncontiguous++;
    return true;
  }
  const int64_t n = ggml_nelements(t);
  std::vector<uint8_t> raw(ggml_nbytes(t));
  ggml_backend_tensor_get(t, raw.data(), 0, raw.size());
  std::vector<float> f(static_cast<size_t>(n));
  if (t->type == GGML_TYPE_F32) {
    std::memcpy(f.data(), raw.data(), f.size() * sizeof(float));
  } else {
    const ggml_type_traits* tr = ggml_get_type_traits(t->type);
    if (tr == nullptr || tr->to_float == nullptr) return true;  // an integer tensor (ids, positions)
    tr->to_float(raw.data(), f.data(), n);
  }
  std::vector<int64_t> shape;  // row-major: ggml's ne reversed, leading 1s dropped
  for (int d = GGML_MAX_DIMS - 1; d >= 0; d--)
    if (!shape.empty() || t->ne[d] != 1 || d == 0) shape.push_back(t->ne[d]);
  cap->tensors[name] = {shape, std::move(f)};
  return true;
}

// Decode mode: append one llama_decode call's capture (`rows` positions) to `acc`. A name keeps its
// rows only while every call gives it rows of one size, the token dimension leading.
void append_rows(Capture& acc, std::map<std::string, int64_t>& acc_rows, std::map<std::string, bool>& skipped,
                 Capture& call, int64_t rows) {
  for (auto& [name, st] : call.tensors) {
    if (skipped[name]) continue;
    const int64_t n = static_cast<int64_t>(st.second.size());
    auto it = acc.tensors.find(name);
    if (it == acc.tensors.end()) {
      // The first call that names it fixes its per-row shape: the token dimension leads (dropped
      // from the shape when the call has one token).
      std::vector<int64_t> per_row = st.first;
      if (rows > 1) {
        if (per_row.empty() || per_row.front() != rows) { skipped[name] = true; continue; }
        per_row.erase(per_row.begin());
      }
      acc.tensors[name] = {per_row, std::move(st.second)};
      acc_rows[name] = rows;
      continue;
    }
    int64_t per = 1;
    for (int64_t d : it->second.first) per *= d;
    if (n != per * rows) { skipped[name] = true; continue; }
    it->second.second.insert(it->second.second.end(), st.second.begin(), st.second.end());
    acc_rows[name] += rows;
  }
  for (const auto& [name, k] : call.repeats) acc.repeats[name] = std::max(acc.repeats[name], k);
  acc.skipped_noncontiguous = std::max(acc.skipped_noncontiguous, call.skipped_noncontiguous);
}

void write_dump(const std::string& path, const Capture& cap, const json& meta) {
  json h;
  h["__metadata__"] = meta;
  size_t off = 0;
  for (const auto& [name, st] : cap.tensors) {
    const size_t bytes = st.second.size() * sizeof(float);
    h[name] = {{"dtype", "F32"}, {"shape", st.first}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string hs = h.dump();
  while (hs.size() % 8) hs += ' ';
  const std::string tmp = path + ".part";
  std::ofstream f(tmp, std::ios::binary);
  const uint64_t n = hs.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(hs.data(), static_cast<std::streamsize>(hs.size()));
  for (const auto& [name, st] : cap.tensors)
    f.write(reinterpret_cast<const char*>(st.second.data()), static_cast<std::streamsize>(st.second.size() * 4));
  f.close();
  if (!f || std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot write " + path);
}

void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    std::ifstream mf(a.golden + "/manifest.json");
    if (!mf) throw std::runtime_error("no manifest.json in " + a.golden + " (expected a golden record directory)");
    const json manifest = json::parse(mf);
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model* model = llama_model_load_from_file(a.model.c_str(), mp);
    if (!model) throw std::runtime_error("llama.cpp could not load " + a.model);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

    std::filesystem::create_directories(a.out);
    int written = 0;
    for (const json& c : manifest.at("cases")) {
      const std::string id = c.at("id"), file = a.golden + "/" + c.at("file").get<std::string>();
      if (!a.only_case.empty() && id != a.only_case) continue;
      const Safetensors g = read_safetensors(file);
      std::vector<int32_t> toks = i32_tensor(g, "prompt", file);
      const std::vector<int32_t> cont = i32_tensor(g, "continuation", file);
      toks.insert(toks.end(), cont.begin(), cont.end());
      const int T = static_cast<int>(toks.size());
      for (int32_t t : toks)
        if (t < 0 || t >= n_vocab)
          throw std::runtime_error(file + ": token " + std::to_string(t) + " outside the model's vocabulary of " +
                                   std::to_string(n_vocab) + " (a golden record of another model?)");

      Capture cap{std::regex(a.names), {}, {}, 0};
      const int P = static_cast<int>(i32_tensor(g, "prompt", file).size());
      const int first = a.decode ? std::max(P, 1) : T;  // the first call's tokens
      llama_context_params cp = llama_context_default_params();
      cp.n_ctx = static_cast<uint32_t>(T + 16);
      cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(first);  // one graph per call: each name is seen once
      cp.n_seq_max = 1;
      cp.n_threads = cp.n_threads_batch = a.threads;
      cp.type_k = cp.type_v = a.cache_type;
      cp.flash_attn_type = a.flash;
      cp.cb_eval = on_tensor;
      Capture call{std::regex(a.names), {}, {}, 0};
      cp.cb_eval_user_data = a.decode ? &call : &cap;
      llama_context* ctx = llama_init_from_model(model, cp);
      if (!ctx) throw std::runtime_error("llama.cpp could not create a context of " + std::to_string(T) + " tokens");
      std::vector<float> logits(static_cast<size_t>(T) * n_vocab);
      std::map<std::string, int64_t> acc_rows;
      std::map<std::string, bool> skipped;
      llama_batch b = llama_batch_init(first, 0, 1);
      for (int p0 = 0; p0 < T;) {
        const int n = p0 == 0 ? first : 1;
        for (int i = 0; i < n; i++) {
          b.token[i] = toks[p0 + i];
          b.pos[i] = p0 + i;
          b.n_seq_id[i] = 1;
          b.seq_id[i][0] = 0;
          b.logits[i] = 1;
        }
        b.n_tokens = n;
        call.tensors.clear();
        call.repeats.clear();
        const int rc = llama_decode(ctx, b);
        if (rc != 0)
          throw std::runtime_error("llama_decode failed with " + std::to_string(rc) + " on case " + id + " at position " +
                                   std::to_string(p0));
        for (int i = 0; i < n; i++)
          std::memcpy(&logits[static_cast<size_t>(p0 + i) * n_vocab], llama_get_logits_ith(ctx, i), sizeof(float) * n_vocab);
        if (a.decode) append_rows(cap, acc_rows, skipped, call, n);
        p0 += n;
      }
      json decode_skipped = json::array();
      if (a.decode) {
        // A name that some call did not give (or gave in another shape) has fewer than T rows: left out.
        for (auto it = cap.tensors.begin(); it != cap.tensors.end();) {
          if (acc_rows[it->first] != T) skipped[it->first] = true;
          if (skipped[it->first]) it = cap.tensors.erase(it);
          else {
            it->second.first.insert(it->second.first.begin(), T);
            ++it;
          }
        }
        for (const auto& [name, sk] : skipped)
          if (sk) decode_skipped.push_back(name);
      }
      cap.tensors["logits"] = {{T, n_vocab}, std::move(logits)};
      llama_batch_free(b);
      llama_free(ctx);

      json repeats = json::object();
      for (const auto& [n, k] : cap.repeats) repeats[n] = std::to_string(k);
      const json meta = {{"format", "degenbisect-dump"}, {"names", "llama.cpp"}, {"case", id},
                         {"tokens", std::to_string(T)}, {"model", a.model},
                         {"cache_type", ggml_type_name(a.cache_type)},
                         {"skipped_noncontiguous", std::to_string(cap.skipped_noncontiguous)},
                         {"repeated_names", repeats.dump()},
                         {"mode", a.decode ? "decode" : "prefill"}, {"prompt_tokens", std::to_string(P)},
                         {"decode_skipped", decode_skipped.dump()}};
      write_dump(a.out + "/" + id + ".safetensors", cap, meta);
      std::fprintf(stderr, "llama-dump: %s: %d tokens (%s), %zu tensors\n", id.c_str(), T,
                   a.decode ? ("decode mode: " + std::to_string(P) + " in one batch, then one per batch").c_str() : "one batch",
                   cap.tensors.size());
      written++;
    }
    llama_model_free(model);
    if (written == 0) throw std::runtime_error("no case" + (a.only_case.empty() ? "" : " '" + a.only_case + "'") +
                                               " in " + a.golden + "/manifest.json");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llama-dump: %s\n", e.what());
    return 1;
  }
  return 0;
}
