// compare --dump (src/subjects/dump_reader.h) without llama.cpp: our own engine writes a dump the way
// llama.cpp's would (its names, its tiled value-head order, every position in one prefill), with a
// catalogue fault injected at one layer. The dump's judge must say good without a fault and, with
// one, name the fault's layer and the catalogue's first corrupted step: the localiser checked against
// the fault catalogue, as bisect is (tests/test_bisect.cpp, selftest). Faults of one-token calls
// (conv-window-stuck, kv-off-by-one) cannot show in a prefill dump: checked to pass unseen, which is
// what docs/dump-format.md says. tests/cli/llama_engine.sh does the same with the real llama.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>

#include "backends/make_backend.h"
#include "subjects/dump_reader.h"
#include "diag/golden.h"
#include "engine/backend_factory.h"
#include "engine/engine.h"
#include "engine/faults.h"
#include "engine/run_config.h"
#include "helpers.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"

using namespace degen;
namespace fs = std::filesystem;

namespace {

const char* const kCase = "two-plus-two";

fs::path trained() { return test::source_dir() / "models" / "tiny-trained"; }
fs::path smoke() { return test::source_dir() / "golden" / "tiny-trained" / "smoke"; }

// Our grouped value heads to llama.cpp's tiled order, written independently of the judge's inverse:
// tiled slot j holds value head (j mod n_k)·r + j / n_k.
std::vector<float> tile(const std::vector<float>& v, int64_t rows, const ModelConfig& c, int64_t off, int64_t block) {
  std::vector<float> out = v;
  const int64_t cols = static_cast<int64_t>(v.size()) / rows;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < c.n_v; ++j) {
      const int64_t grouped = (j % c.n_k) * c.r() + j / c.n_k;
      for (int64_t e = 0; e < block; ++e)
        out[static_cast<size_t>(i * cols + off + j * block + e)] = v[static_cast<size_t>(i * cols + off + grouped * block + e)];
    }
  return out;
}

// Runs `config` over the case's golden sequence (one prefill) and writes what llama-dump would.
void write_dump(const Model& m, const std::vector<int32_t>& seq, const std::string& config, const fs::path& dir,
                const std::string& names = "llama.cpp") {
  const RunConfig rc = parse_run_config(config);
  auto be = make_backend(rc, m.config);
  Engine eng(m.config, m.weights, *be, engine_options(rc));
  std::map<std::string, std::vector<float>> steps;
  Trace tr;
  tr.observer = [&](const TraceEvent& ev, Tensor& t, Backend& b) {
    if (!ev.mtp) steps[ev.name] = b.to_host_f32(t);
  };
  SeqState st = eng.new_state();
  ForwardOptions fo;
  fo.logits = LogitsRows::all;
  ForwardOutput out = eng.forward({SeqInput{&st, seq}}, fo, &tr);
  const int64_t T = static_cast<int64_t>(seq.size());
  SafetensorsWriter w;
  w.set_metadata("format", "degenbisect-dump");
  w.set_metadata("names", names);
  w.set_metadata("case", kCase);
  w.add_f32("logits", {T, m.config.vocab_size}, be->to_host_f32(out.logits));
  const ModelConfig& c = m.config;
  for (const DumpName& n : names == "degenbisect" ? degenbisect_dump_names() : llama_cpp_dump_names()) {
    for (int l = -1; l < c.num_layers; ++l) {
      const bool model_level = n.kind == 'M';
      if (model_level != (l < 0)) continue;
      if (!model_level && n.kind != '*' && n.kind != (c.layer_types[static_cast<size_t>(l)] == LayerKind::full ? 'A' : 'G'))
        continue;
      auto it = steps.find(trace_name(n.step, l));
      if (it == steps.end()) continue;
      std::vector<float> v = it->second;
      if (n.order == HeadOrder::vheads_tiled) v = tile(v, T, c, n.offset_keys * c.d_key(), n.block_is_dv ? c.d_v : 1);
      if (n.scale_q)
        for (float& x : v) x = static_cast<float>(x * std::sqrt(static_cast<double>(c.d_k)));
      const std::string name = model_level ? std::string(n.engine) : std::string(n.engine) + "-" + std::to_string(l);
      w.add_f32(name, {T, static_cast<int64_t>(v.size()) / T}, v);
    }
  }
  fs::create_directories(dir);
  w.write(dir / (std::string(kCase) + ".safetensors"));
}

struct Judge {
  GoldenRecord rec = GoldenRecord::open(smoke());
  std::unique_ptr<Model> model = load_model(trained());
  std::unique_ptr<Tokenizer> tok = Tokenizer::load(trained() / "tokenizer.json");
  std::vector<int32_t> seq() const {
    for (size_t i = 0; i < rec.cases().size(); ++i)
      if (rec.cases()[i].id == kCase) return rec.load_case(i, false).sequence();
    FAIL("no case");
    return {};
  }
  CompareResult judge(const fs::path& dir, FloorClass fc = FloorClass::fp32) const {
    DumpCompareOptions o;
    o.dir = dir.string();
    o.fclass = fc;
    o.cases = {kCase};
    return compare_dump(rec, *model, tok.get(), o, make_backend);
  }
};

std::string reasons(const CompareResult& r) {
  std::string s;
  for (const std::string& x : r.cases.at(0).reasons) s += x + "\n";
  return s;
}

}  // namespace

TEST_CASE("compare --dump: an honest fp32-class engine passes, at every layer") {
  Judge j;
  test::TempDir dir("dump-good");
  write_dump(*j.model, j.seq(), "precision=fp64", dir.path());
  const CompareResult r = j.judge(dir.path());
  INFO(reasons(r));
  CHECK(r.exit_code == 0);
  CHECK(r.source == "dump");
  REQUIRE(r.cases.size() == 1);
  for (const LayerRow& row : r.cases[0].layers) {
    CHECK(row.pass[0]);
    CHECK(row.drift[0].has_value());
  }
  CHECK(r.cases[0].logits[0]->pass);
  // A bf16 engine is bad against the fp32 class and good against its own.
  write_dump(*j.model, j.seq(), "precision=bf16", dir.path() / "bf16");
  CHECK(j.judge(dir.path() / "bf16").exit_code == 1);
  CHECK(j.judge(dir.path() / "bf16", FloorClass::bf16).exit_code == 0);
}

TEST_CASE("compare --dump: each catalogue fault of a prefill is named at its layer and its first corrupted step") {
  Judge j;
  const ModelConfig& c = j.model->config;
  int named = 0;
  for (const FaultInfo& f : fault_catalogue()) {
    if (f.applied != FaultApplied::op_flag || f.needs_tp || f.needs_mtp || f.magnitude_dependent || (f.inert_on && f.inert_on(c))) continue;
    if (f.site == FaultSite::moe_layer || f.site == FaultSite::model) continue;
    const int layer = f.site == FaultSite::full_layer ? 3 : 4;  // layers 3 and 7 attention; 4 the GDN after one
    test::TempDir dir("dump-fault");
    write_dump(*j.model, j.seq(), std::string("precision=fp64,fault=") + f.name + "@" + std::to_string(layer), dir.path());
    const CompareResult r = j.judge(dir.path());
    INFO(f.name, "\n", reasons(r));
    const std::string op = f.op;
    if (f.id == Fault::conv_window_stuck || f.id == Fault::kv_off_by_one) {
      CHECK(r.exit_code == 0);  // one-token calls only: a prefill dump cannot see them
      continue;
    }
    CHECK(r.exit_code == 1);
    REQUIRE(r.cases[0].first_break.has_value());
    CHECK(r.cases[0].first_break->second == layer);
    CHECK(reasons(r).find("first step over its floor in layer " + std::to_string(layer) + ": " + op + " ") !=
          std::string::npos);
    ++named;
  }
  CHECK(named >= 7);
}

TEST_CASE("compare --dump: bad dumps are input errors naming what was expected") {
  Judge j;
  test::TempDir dir("dump-bad");
  CHECK_THROWS_WITH_AS(j.judge(dir.path()), doctest::Contains("no dump for case 'two-plus-two'"), InputError);
  CHECK_THROWS_WITH_AS(j.judge(dir.path() / "none"), doctest::Contains("not a folder"), InputError);
  // Another sequence: the first 10 tokens only.
  std::vector<int32_t> s = j.seq();
  s.resize(10);
  write_dump(*j.model, s, "precision=fp64", dir.path());
  CHECK_THROWS_WITH_AS(j.judge(dir.path()), doctest::Contains("logits for 10 positions"), InputError);
}

TEST_CASE("compare --dump: a dump in our own step names (a transformers hook script) is judged the same way") {
  Judge j;
  test::TempDir dir("dump-ours");
  write_dump(*j.model, j.seq(), "precision=fp64", dir.path() / "good", "degenbisect");
  CHECK(j.judge(dir.path() / "good").exit_code == 0);
  write_dump(*j.model, j.seq(), "precision=fp64,fault=gdn-skip-l2norm@5", dir.path() / "bad", "degenbisect");
  const CompareResult r = j.judge(dir.path() / "bad");
  INFO(reasons(r));
  CHECK(r.exit_code == 1);
  CHECK(reasons(r).find("first step over its floor in layer 5: gdn_q (the engine's 'gdn_q-5'") != std::string::npos);
  write_dump(*j.model, j.seq(), "precision=fp64", dir.path() / "other", "vllm");
  CHECK_THROWS_WITH_AS(j.judge(dir.path() / "other"), doctest::Contains("expected 'llama.cpp' or 'degenbisect'"), InputError);
}

namespace {

// Copies the dump at `from` to `to` with tensor `name` replaced (removed when shape is empty) and
// metadata `meta` set: a malformed dump. The new tensor is zeros of `dtype` and `shape`, or, with
// `values`, the old F32 values passed through it.
void rewrite_dump(const fs::path& from, const fs::path& to, const std::string& name, DType dtype,
                  const std::vector<int64_t>& shape, const std::map<std::string, std::string>& meta = {},
                  const std::function<float(float)>& values = {}) {
  const auto f = SafetensorsFile::open(from);
  SafetensorsWriter w;
  for (const auto& [k, v] : f->metadata()) w.set_metadata(k, v);
  for (const auto& [k, v] : meta) w.set_metadata(k, v);
  for (const TensorView& t : f->tensors()) {
    if (t.name != name) {
      w.add(t.name, t.dtype, t.shape, t.data, t.nbytes);
      continue;
    }
    if (shape.empty()) continue;
    if (values) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = values(t.at(i));
      w.add_f32(name, t.shape, v);
      continue;
    }
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const std::vector<uint8_t> zeros(static_cast<size_t>(n) * dtype_size(dtype), 0);
    w.add(name, dtype, shape, zeros.data(), zeros.size());
  }
  fs::create_directories(to.parent_path());
  w.write(to);
}

}  // namespace

// Issue 40: impossible logits. Before the fix, logits of about 3e38 (or the good ones plus 1e20) gave
// a KLD of -5.53 nats, top-1 agreement 0 % and the verdict good: log-softmax lost log Σexp beside a
// logit of that size, every id at the maximum got p = 1, and the "probabilities" summed to thousands.
TEST_CASE("compare --dump: logits beyond any real model's range are bad, never a negative KLD") {
  Judge j;
  test::TempDir dir("dump-huge");
  const std::vector<std::pair<std::string, std::function<float(float)>>> edits = {
      {"3e38", [](float) { return 3e38f; }},
      {"plus-1e20", [](float x) { return x + 1e20f; }},
      {"times-1e6", [](float x) { return x * 1e6f; }}};
  write_dump(*j.model, j.seq(), "precision=fp64", dir.path() / "good");
  const fs::path good = dir.path() / "good" / (std::string(kCase) + ".safetensors");
  for (const auto& edit : edits) {
    const std::string& name = edit.first;
    rewrite_dump(good, dir.path() / name / good.filename(), "logits", DType::f32, {1}, {}, edit.second);
    const CompareResult r = j.judge(dir.path() / name);
    const std::string why = reasons(r);
    INFO(name, "\n", why);
    CHECK(r.exit_code == 1);
    REQUIRE(r.cases.at(0).logits[0].has_value());
    CHECK_FALSE(r.cases[0].logits[0]->pass);
    CHECK(r.cases[0].logits[0]->mean_kld >= 0);
    for (double k : r.cases[0].logits[0]->kld) CHECK(k >= 0);
    CHECK(why.find("beyond ±32768") != std::string::npos);
  }
}

// Issue 40: an integer-typed tensor in a dump was read through load_as_f32 and reported as an
// "internal error". Every tensor the judge may read is checked (dtype, rank, rows, columns) when the
// dump is opened: exit 128 naming the tensor, what it has and what was expected.
TEST_CASE("compare --dump: a tensor of the wrong dtype or shape is an input error naming it") {
  Judge j;
  test::TempDir dir("dump-dtype");
  write_dump(*j.model, j.seq(), "precision=fp64", dir.path() / "good");
  const fs::path good = dir.path() / "good" / (std::string(kCase) + ".safetensors");
  const int64_t T = static_cast<int64_t>(j.seq().size()), V = j.model->config.vocab_size,
                H = j.model->config.hidden_size;
  struct Bad {
    const char* tensor;
    DType dtype;
    std::vector<int64_t> shape;
    const char* says;
  };
  const std::vector<Bad> bad = {
      {"logits", DType::i32, {T, V}, "tensor 'logits' has dtype I32; expected F32, F16 or BF16"},
      {"logits", DType::i64, {T, V}, "tensor 'logits' has dtype I64; expected F32, F16 or BF16"},
      {"l_out-3", DType::i32, {T, H}, "tensor 'l_out-3' has dtype I32; expected F32, F16 or BF16"},
      {"l_out-5", DType::u8, {T, H}, "tensor 'l_out-5' has dtype U8"},
      {"attn_norm-2", DType::f64, {T, H}, "tensor 'attn_norm-2' has dtype F64"},
      {"z-0", DType::i64, {T, 4}, "tensor 'z-0' has dtype I64"},
      {"model.input_embed", DType::f32, {T, 5}, "tensor 'model.input_embed' has shape [" },
      {"model.input_embed", DType::f32, {T}, "expected [" },
      {"l_out-1", DType::f32, {T, H + 1}, "tensor 'l_out-1' has shape ["},
      {"l_out-1", DType::f32, {T - 1, H}, "expected " },
      {"l_out-1", DType::f32, {}, "no 'l_out-1' tensor"},
      {"Qcur-3", DType::f32, {T + 1, 8}, "tensor 'Qcur-3' has shape ["},
      {"logits", DType::f32, {T, V, 1}, "no 'logits' tensor [tokens, vocabulary] (found shape ["},
      {"logits", DType::f32, {}, "no 'logits' tensor"},
  };
  for (const Bad& b : bad) {
    const fs::path d = dir.path() / "bad";
    fs::remove_all(d);
    rewrite_dump(good, d / good.filename(), b.tensor, b.dtype, b.shape);
    INFO(b.tensor, " ", dtype_name(b.dtype), " ", shape_str(b.shape));
    CHECK_THROWS_WITH_AS(j.judge(d), doctest::Contains(b.says), InputError);
  }
  // The metadata's token count, when present, is the sequence's, in decimal digits.
  for (const std::string& tokens : {std::string("51"), std::string("1e300"), std::string("-52"), std::string("")}) {
    const fs::path d = dir.path() / "tokens";
    fs::remove_all(d);
    rewrite_dump(good, d / good.filename(), "", DType::f32, {}, {{"tokens", tokens}});
    INFO("tokens '", tokens, "'");
    CHECK_THROWS_WITH_AS(j.judge(d), doctest::Contains(doctest::String(("metadata tokens '" + tokens + "'").c_str())), InputError);
  }
  // Issue 41: the mode is prefill or decode; decode names the tokens of its first batch.
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> modes = {
      {{{"mode", "zzz"}}, "metadata mode 'zzz', expected 'prefill' or 'decode'"},
      {{{"mode", "decode"}}, "metadata mode 'decode' with prompt_tokens ''"},
      {{{"mode", "decode"}, {"prompt_tokens", "0"}}, "metadata mode 'decode' with prompt_tokens '0'"},
      {{{"mode", "decode"}, {"prompt_tokens", std::to_string(T + 1)}}, "expected 1 to " + std::to_string(T)},
  };
  for (const auto& [meta, says] : modes) {
    const fs::path d = dir.path() / "mode";
    fs::remove_all(d);
    rewrite_dump(good, d / good.filename(), "", DType::f32, {}, meta);
    INFO(says);
    CHECK_THROWS_WITH_AS(j.judge(d), doctest::Contains(doctest::String(says.c_str())), InputError);
  }
  {
    // A correct engine's values judged as decode mode (our reference decoding the prompt, then a
    // token per forward): good, its figures in the decode columns (index 1), none in prefill's.
    const fs::path d = dir.path() / "decode";
    rewrite_dump(good, d / good.filename(), "", DType::f32, {}, {{"mode", "decode"}, {"prompt_tokens", "3"}});
    const CompareResult r = j.judge(d);
    INFO(reasons(r));
    CHECK(r.exit_code == 0);
    CHECK_FALSE(r.cases.at(0).logits[0].has_value());
    REQUIRE(r.cases[0].logits[1].has_value());
    CHECK(r.cases[0].logits[1]->pass);
    REQUIRE_FALSE(r.cases[0].layers.empty());
    CHECK(r.cases[0].layers[0].drift[1].has_value());
    CHECK_FALSE(r.cases[0].layers[0].drift[0].has_value());
  }
  // BF16 and F16 are read (docs/dump-format.md), and the right count is accepted.
  const fs::path d = dir.path() / "bf16";
  rewrite_dump(good, d / good.filename(), "l_out-2", DType::bf16, {T, H}, {{"tokens", std::to_string(T)}});
  const CompareResult r = j.judge(d);  // zeros for layer 2's output: judged, not refused
  CHECK(r.exit_code == 1);
  REQUIRE(r.cases.at(0).first_break.has_value());
  CHECK(r.cases[0].first_break->second == 2);
}
