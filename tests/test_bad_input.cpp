// Hostile and absurd inputs (issue 21 items 1, 3, 4): every one is an InputError (exit 128) that says
// what was expected and what was found, never a crash, a hang or unbounded memory.
//  - JSON nested 300,000 deep in each reader of external JSON (the stack overflowed in dump());
//  - a FIFO, /dev/zero or a folder where a file is expected; the size cap of read_file;
//  - config sizes whose products overflow int64; an empty prompt tensor in a golden record.
// (Safetensors data-section coverage, including a header length one byte short: test_safetensors.cpp.)
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <fstream>
#include <limits>
#include <string>

#include "record/cases.h"
#include "diag/golden.h"
#include "diag/model_eval.h"
#include "diag/sweep.h"
#include "helpers.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "util/file_io.h"
#include "model/tokenizer.h"
#include "report/inputs.h"
#include "util/error.h"
#include "util/json_input.h"
#include "util/sha256.h"

using namespace degen;
using degen::test::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string deep_array(int n) { return std::string(static_cast<size_t>(n), '[') + std::string(static_cast<size_t>(n), ']'); }

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary).write(text.data(), static_cast<std::streamsize>(text.size()));
}

// Runs f, expecting an InputError whose message contains every needle.
template <typename F>
void expect_input_error(F&& f, std::initializer_list<std::string> needles) {
  bool threw = false;
  try {
    f();
  } catch (const InputError& e) {
    threw = true;
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(e.code() == ExitCode::input);
    for (const std::string& n : needles) CHECK_MESSAGE(msg.find(n) != std::string::npos, "missing '" << n << "'");
  }
  CHECK_MESSAGE(threw, "no InputError");
}

}  // namespace

TEST_CASE("bad input: JSON nesting depth is measured outside strings and bounded") {
  CHECK(json_nesting_depth("") == 0);
  CHECK(json_nesting_depth("[[{}], {\"a\": [1]}]") == 3);
  CHECK(json_nesting_depth(R"(["[[[[", "\"[[[[\\", {"k]": "{{{{"}])") == 2);  // brackets in strings do not count
  CHECK(json_nesting_depth(deep_array(300000)) == kMaxJsonDepth + 1);        // counting stops past the limit

  CHECK(parse_json(deep_array(kMaxJsonDepth), "ok.json").is_array());
  expect_input_error([] { parse_json(deep_array(kMaxJsonDepth + 1), "deep.json"); },
                     {"deep.json", "nested deeper than 256 levels", "expected at most 256"});
  // Depth is an InputError even where syntax errors are not exceptions.
  expect_input_error([] { parse_json(deep_array(300000), "deep.json", /*allow_exceptions=*/false); }, {"deep.json"});
  CHECK(parse_json("{", "x", false).is_discarded());
  CHECK_THROWS_AS(parse_json("{", "x"), json::parse_error);
}

TEST_CASE("bad input: json_excerpt stops at its limit, even for a 300,000-deep value") {
  json root = json::array();
  json* cur = &root;
  for (int i = 0; i < 300000; ++i) {  // built without the parser; nlohmann destroys it iteratively
    cur->push_back(json::array());
    cur = &cur->back();
  }
  const std::string s = json_excerpt(root, 60);
  CHECK(s.size() == 60);
  CHECK(s == std::string(57, '[') + "...");
  CHECK(json_excerpt(json{{"a", 1}}) == R"({"a":1})");
  // A cut never leaves half a UTF-8 sequence: "\"" + 30 x "é" cut at 10 characters.
  std::string e;
  for (int i = 0; i < 30; ++i) e += "\xc3\xa9";
  const std::string cut = json_excerpt(json(e), 10);
  CHECK(cut == "\"\xc3\xa9\xc3\xa9\xc3\xa9...");
}

TEST_CASE("bad input: every reader of external JSON rejects 300,000 nested arrays") {
  TempDir tmp("deep");
  const std::string deep = deep_array(300000);
  SUBCASE("cases file (the prompt)") {
    expect_input_error([&] { parse_suite(R"({"suite": "s", "cases": [{"id": "a", "prompt": )" + deep + "}]}", "cases.json"); },
                       {"cases.json", "nested deeper than 256"});
  }
  SUBCASE("config.json") {
    fs::create_directories(tmp / "m");
    write_text(tmp / "m" / "config.json", R"({"model_type": "qwen3_5", "text_config": )" + deep + "}");
    expect_input_error([&] { load_model_config(tmp / "m"); }, {"config.json", "nested deeper"});
  }
  SUBCASE("safetensors header") {
    const std::string h = R"({"a": )" + deep + "}";
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    write_text(tmp / "deep.safetensors", s + h);
    expect_input_error([&] { SafetensorsFile::open(tmp / "deep.safetensors"); }, {"deep.safetensors", "nested deeper"});
  }
  SUBCASE("tokenizer.json") {
    expect_input_error([&] { Tokenizer::from_json_text(R"({"model": )" + deep + "}", "tokenizer.json"); },
                       {"tokenizer.json", "nested deeper"});
  }
  SUBCASE("held-out set") {
    expect_input_error([&] { parse_heldout(R"({"questions": )" + deep + "}", "heldout.json"); }, {"heldout.json", "nested deeper"});
  }
  SUBCASE("sweep matrix") {
    write_text(tmp / "matrix.json", R"({"axes": )" + deep + "}");
    expect_input_error([&] { load_sweep_matrix(tmp / "matrix.json"); }, {"matrix.json", "nested deeper"});
  }
  SUBCASE("report input: sweep.json and results.jsonl") {
    fs::create_directories(tmp / "sw");
    write_text(tmp / "sw" / "sweep.json", R"({"name": )" + deep + "}");
    expect_input_error([&] { report::read_sweep_folder(tmp / "sw"); }, {"sweep.json", "nested deeper"});
    fs::create_directories(tmp / "sw2");
    write_text(tmp / "sw2" / "results.jsonl", R"({"cell": )" + deep + "}\n");
    expect_input_error([&] { report::read_sweep_folder(tmp / "sw2"); }, {"results.jsonl", "nested deeper"});
  }
  SUBCASE("golden manifest") {
    fs::create_directories(tmp / "g");
    write_text(tmp / "g" / "manifest.json", R"({"format": )" + deep + "}");
    expect_input_error([&] { GoldenRecord::open(tmp / "g"); }, {"manifest.json", "nested deeper"});
  }
}

TEST_CASE("bad input: read_file refuses folders, FIFOs and devices, and caps the size") {
  TempDir tmp("rf");
  expect_input_error([&] { read_file(tmp.path()); }, {tmp.path().string(), "expected a regular file, found a folder"});
  REQUIRE(::mkfifo((tmp / "fifo").c_str(), 0600) == 0);
  // Without a writer, a blocking open of the FIFO would wait forever: the test would hang, not fail.
  expect_input_error([&] { read_file(tmp / "fifo"); }, {"fifo", "expected a regular file, found a named pipe (FIFO)"});
  expect_input_error([&] { read_file("/dev/zero"); }, {"/dev/zero", "found a character device"});
  write_text(tmp / "big.txt", std::string(100, 'x'));
  CHECK(read_file(tmp / "big.txt", 100).size() == 100);
  expect_input_error([&] { read_file(tmp / "big.txt", 99); }, {"big.txt", "100 bytes, expected at most 99"});

  // The readers of user-given paths go through it.
  expect_input_error([&] { load_suite(tmp / "fifo"); }, {"named pipe"});
  expect_input_error([&] { load_suite("/dev/zero"); }, {"character device"});
  expect_input_error([&] { load_sweep_matrix(tmp / "fifo"); }, {"named pipe"});
  expect_input_error([&] { Tokenizer::load(tmp / "fifo"); }, {"named pipe"});
  expect_input_error([&] { SafetensorsFile::open(tmp / "fifo"); }, {"fifo", "expected a regular file, found a named pipe"});
  fs::create_directories(tmp / "m");
  REQUIRE(::mkfifo((tmp / "m" / "config.json").c_str(), 0600) == 0);
  expect_input_error([&] { load_model_config(tmp / "m"); }, {"config.json", "named pipe"});
}

namespace {
// A minimal qwen3_5_text config with `key` set to `value` (the other sizes are the tiny preset's).
json sized_config(const std::string& key, json value) {
  json j = {{"model_type", "qwen3_5_text"}, {"vocab_size", 1000}, {"hidden_size", 64}, {"num_hidden_layers", 4},
            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16}, {"intermediate_size", 128},
            {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}, {"linear_key_head_dim", 16},
            {"linear_value_head_dim", 16}};
  j[key] = std::move(value);
  return j;
}
}  // namespace

TEST_CASE("bad input: config sizes whose products overflow int64 are rejected, naming the fields") {
  CHECK(parse_model_config(sized_config("hidden_size", 64), "c").hidden_size == 64);
  const int64_t max64 = std::numeric_limits<int64_t>::max();
  // A single size beyond a tensor dimension.
  expect_input_error([&] { parse_model_config(sized_config("hidden_size", max64), "cfg.json"); },
                     {"cfg.json", "'hidden_size'", "at most 2^31-1", "9223372036854775807"});
  expect_input_error([&] { parse_model_config(sized_config("vocab_size", int64_t(1) << 40), "c"); }, {"'vocab_size'"});
  // Sizes each within bounds whose products are not.
  expect_input_error([&] { parse_model_config(sized_config("head_dim", int64_t(1) << 28), "c"); },
                     {"num_attention_heads (4)", "head_dim (268435456)", "32-bit int"});
  json big = sized_config("hidden_size", int64_t(1) << 30);
  big["vocab_size"] = int64_t(1) << 30;
  expect_input_error([&] { parse_model_config(big, "c"); }, {"vocab_size (1073741824) x hidden_size (1073741824)"});
  json layers = sized_config("hidden_size", int64_t(1) << 20);
  layers["num_hidden_layers"] = 1024;
  layers["intermediate_size"] = int64_t(1) << 20;
  layers["full_attention_interval"] = 4;
  expect_input_error([&] { parse_model_config(layers, "c"); }, {"num_hidden_layers (+ MTP layers + 1) (1025)", "parameters in all"});
  json moe = {{"model_type", "qwen3_5_moe_text"}, {"vocab_size", 1000}, {"hidden_size", int64_t(1) << 20},
              {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
              {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}, {"linear_key_head_dim", 16},
              {"linear_value_head_dim", 16}, {"num_experts", 4096}, {"num_experts_per_tok", 2},
              {"moe_intermediate_size", int64_t(1) << 30}};
  expect_input_error([&] { parse_model_config(moe, "c"); }, {"num_experts (4096)", "moe_intermediate_size (1073741824)"});
}

TEST_CASE("bad input: layer and expert counts that would size the tool's tables beyond any model are rejected") {
  // A config.json with 3,000,000 layers (58 MB) made `inspect` run 7 minutes in 21 GB building its
  // weight table (found while fuzzing config.json, issue 21).
  json many = sized_config("hidden_size", 64);
  many["num_hidden_layers"] = 3000000;
  many["full_attention_interval"] = 4;
  expect_input_error([&] { parse_model_config(many, "cfg.json"); }, {"cfg.json", "'num_hidden_layers'", "at most 1024", "3000000"});
  many["num_hidden_layers"] = 1024;
  CHECK(parse_model_config(many, "cfg.json").num_layers == 1024);
  json moe = {{"model_type", "qwen3_5_moe_text"}, {"vocab_size", 1000}, {"hidden_size", 64},
              {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
              {"linear_num_key_heads", 2}, {"linear_num_value_heads", 4}, {"linear_key_head_dim", 16},
              {"linear_value_head_dim", 16}, {"num_experts", 5000}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32}};
  expect_input_error([&] { parse_model_config(moe, "c"); }, {"'num_experts'", "at most 4096"});
  moe["num_experts"] = 4096;
  moe["num_hidden_layers"] = 128;
  expect_input_error([&] { parse_model_config(moe, "c"); }, {"num_hidden_layers x num_experts = 128 x 4096", "at most 262144"});
  moe["num_hidden_layers"] = 64;
  CHECK(parse_model_config(moe, "c").num_experts == 4096);
  moe["mtp_num_hidden_layers"] = 100;
  expect_input_error([&] { parse_model_config(moe, "c"); }, {"'mtp_num_hidden_layers'", "at most 16"});
}

TEST_CASE("bad input: a golden record case with an empty prompt tensor is an input error") {
  const fs::path shipped = test::source_dir() / "golden" / "tiny-qwen35" / "smoke";
  REQUIRE(fs::exists(shipped / "manifest.json"));
  TempDir tmp("gempty");
  const fs::path rec = tmp / "rec";
  fs::copy(shipped, rec, fs::copy_options::recursive);
  const std::string file = "two-plus-two.safetensors";
  {  // rewrite the case file with prompt [0], keeping every other tensor, and re-seal the manifest
    auto f = SafetensorsFile::open(rec / file);
    SafetensorsWriter w;
    for (const auto& [k, v] : f->metadata()) w.set_metadata(k, v);
    for (const TensorView& t : f->tensors()) {
      if (t.name == "prompt") w.add("prompt", DType::i32, {0}, nullptr, 0);
      else w.add(t.name, t.dtype, t.shape, t.data, t.nbytes);
    }
    f.reset();
    w.write(rec / file);
    json m = json::parse(read_file(rec / "manifest.json"));
    const std::string bytes = read_file(rec / file);
    m["files"][file]["bytes"] = bytes.size();
    m["files"][file]["sha256"] = sha256_hex(bytes);
    if (m.contains(kManifestChecksumKey)) m[kManifestChecksumKey] = manifest_checksum(m);
    write_file_atomic(rec / "manifest.json", m.dump(1));
  }
  GoldenRecord g = GoldenRecord::open(rec);
  size_t idx = g.cases().size();
  for (size_t i = 0; i < g.cases().size(); ++i)
    if (g.cases()[i].file == file) idx = i;
  REQUIRE(idx < g.cases().size());
  expect_input_error([&] { g.load_case(idx); }, {file, "tensor 'prompt' is empty", "expected at least one prompt token"});
}
